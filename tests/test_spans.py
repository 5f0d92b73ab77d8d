"""``circuit --by-position`` and ``--spans``: each edge's score split by where in the
context it runs, held to tests/circuit_references.py's plain hooks and autograd taken
position by position (an edge into a query, an MLP or the logits at the position its
input is read, into a key or a value at the key's), on the tiny Llama and Gemma 3;
the spans' shares sum to the position-free score; a file keeps them; bad spans are one
line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.circuits import differences, edges
from attnviz.circuits.circuit import Circuit
from attnviz.cli import app
from tests import circuit_references as reference
from tests.checks import failed_in_process, model_tolerance
from tests.circuit_references import LATE, OTHER, PAIR, THIRD, pair_ids
from tests.hook_references import _tokenizer

FAMILIES = ["llama-lm", "gemma3-lm"]


def _shares(circuit: Circuit) -> dict[tuple[str, str], np.ndarray]:
    """Each edge's scores by span, (K,), by its nodes' names."""
    names = circuit.graph.upstream, circuit.graph.downstream
    upstream, downstream = np.nonzero(circuit.graph.edges)
    by_span = circuit.scored.by_span
    assert by_span is not None
    return {
        (names[0][u], names[1][d]): by_span[:, u, d]
        for u, d in zip(upstream.tolist(), downstream.tolist(), strict=True)
    }


def _worst(found, expected) -> float:
    return max(float(np.abs(found[edge] - np.asarray(expected[edge])).max()) for edge in expected)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("method", "steps"), [("gradient", None), ("ig", 2), ("relp", None)])
def test_scores_by_position_equal_autograd_at_each_position(
    generators, language_models, family, method, steps
):
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    circuit = extractor.circuit(**PAIR, method=method, steps=steps, edges=0, by_position=True)
    tokens = ids.shape[1]
    assert circuit.scored.spans == tuple(str(position) for position in range(tokens))
    if method == "relp":
        from tests.relp_references import relp_rules

        with relp_rules(model):
            expected = reference.estimated_scores(
                model, ids, corrupt_ids, answer_id, versus_id, by_position=True
            )
    else:
        expected = reference.estimated_scores(
            model, ids, corrupt_ids, answer_id, versus_id, steps, by_position=True
        )
    tolerance = model_tolerance(model.config)
    found = _shares(circuit)
    assert _worst(found, expected) <= tolerance
    # more than one position carries an edge's score: a split, not a copy
    spread = [np.count_nonzero(np.abs(np.asarray(v)) > 100 * tolerance) for v in expected.values()]
    assert max(spread) > 1
    # the shares sum to the position-free score
    whole = extractor.circuit(**PAIR, method=method, steps=steps, edges=0)
    np.testing.assert_allclose(circuit.scored.by_span.sum(0), whole.scores, atol=tolerance)
    np.testing.assert_allclose(circuit.scores, whole.scores, atol=tolerance)


def test_positions_before_the_twins_differ_carry_nothing_and_parts_add_up(
    generators, language_models, monkeypatch
):
    """Twins that share their first words: those positions score 0 exactly; read a part of
    the positions at a time (a long text's record), the spans are the whole's."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, LATE, "llama-lm"
    )
    whole = extractor.circuit(**LATE, edges=0, by_position=True)
    start = int((ids[0] != corrupt_ids[0]).nonzero()[0, 0])
    assert start > 0 and not whole.scored.by_span[:start].any()
    monkeypatch.setattr(edges, "_TWINS_TOGETHER_BELOW", 0)
    monkeypatch.setattr(differences, "_PART_AT_MOST", 1)  # a part a position
    parted = extractor.circuit(**LATE, edges=0, by_position=True)
    expected = reference.estimated_scores(
        model, ids, corrupt_ids, answer_id, versus_id, by_position=True
    )
    assert _worst(_shares(parted), expected) <= model_tolerance(model.config)


def _covering(path, text: str, wanted: str) -> list[int]:
    """The tokens whose characters overlap the first occurrence of ``wanted``: read from
    the tokenizer's offsets here, apart from attnviz's finder."""
    encoded = _tokenizer(path)(text, return_offsets_mapping=True)
    start = text.index(wanted)
    return [
        position
        for position, (first, end) in enumerate(encoded["offset_mapping"])
        if first < start + len(wanted) and end > start and end > first
    ]


def test_named_spans_are_the_sums_of_their_positions_and_the_rest(generators, language_models):
    family = "gemma3-lm"
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    pairs = [PAIR, OTHER]
    circuit = extractor.circuit(pairs=pairs, edges=0, spans=["subject=text:man", "text:because"])
    assert circuit.scored.spans == ("subject", "because", "rest")
    found = _shares(circuit)
    expected = {}
    for pair in pairs:
        _, _, ids, corrupt_ids, answer_id, versus_id = pair_ids(
            generators, language_models, pair, family
        )
        per_position = reference.estimated_scores(
            model, ids, corrupt_ids, answer_id, versus_id, by_position=True
        )
        path = generators[family]
        subject = _covering(path, pair["text"], "man")
        because = _covering(path, pair["text"], "because")
        rest = [p for p in range(ids.shape[1]) if p not in subject + because]
        assert subject and because and rest
        for edge, terms in per_position.items():
            spans = [
                float(terms[positions].sum()) / len(pairs) for positions in (subject, because, rest)
            ]
            expected[edge] = np.asarray(expected.get(edge, 0)) + np.asarray(spans)
    assert _worst(found, expected) <= model_tolerance(model.config)
    assert max(float(np.abs(v[0]).max()) for v in expected.values()) > 100 * model_tolerance(
        model.config
    )


def test_exact_scores_by_span_carry_the_corrupted_value_at_the_spans_positions_alone(
    generators, language_models
):
    family = "llama-lm"
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    circuit = extractor.circuit(**PAIR, method="exact", edges=0, spans=["text:man walked"])
    found = _shares(circuit)
    edges = sorted(found)[::5]  # a pass of the reference each
    spanned = _covering(generators[family], PAIR["text"], "man walked")
    rest = [p for p in range(ids.shape[1]) if p not in spanned]
    tolerance = model_tolerance(model.config)
    for k, positions in enumerate((spanned, rest)):
        expected = reference.exact_scores(
            model, ids, corrupt_ids, answer_id, versus_id, edges, positions=positions
        )
        assert max(abs(found[edge][k] - expected[edge]) for edge in edges) <= tolerance
        assert max(abs(value) for value in expected.values()) > 100 * tolerance
    # exact scores are not additive over positions: the edge's own is measured whole
    whole = extractor.circuit(**PAIR, method="exact", edges=0)
    np.testing.assert_allclose(circuit.scores, whole.scores, atol=tolerance)
    assert np.abs(circuit.scored.by_span.sum(0) - whole.scores).max() > 100 * tolerance


def test_a_split_circuit_is_written_and_read_back_with_its_spans(
    runner, generators, language_models, tmp_path
):
    path = generators["llama-lm"]
    arguments = [
        "circuit", PAIR["text"], "--answer", PAIR["answer"], "--versus", PAIR["versus"],
        "--corrupt", PAIR["corrupt"], "--model", str(path), "--spans", "verb=text:walked",
    ]  # fmt: skip
    written = runner.invoke(app, [*arguments, "-f", "json"])
    assert written.exit_code == 0, written.stderr
    document = json.loads(written.stdout)
    assert document["spans"] == ["verb", "rest"]
    first = document["edges"][0]
    assert set(first["by_span"]) == {"verb", "rest"}
    assert sum(first["by_span"].values()) == pytest.approx(first["score"], abs=1e-6)
    file = tmp_path / "split.json"
    file.write_text(written.stdout, encoding="utf-8")
    read = Circuit.load(file)
    direct = language_models["llama-lm"].circuit(**PAIR, spans=["verb=text:walked"])
    assert read.scored.spans == ("verb", "rest")
    np.testing.assert_allclose(read.scored.by_span, direct.scored.by_span, atol=1e-6)
    # the circuit's (edge, span) pairs: each edge's kept_at
    assert read.scored.by_spans and (read.scored.in_graph == direct.scored.in_graph).all()
    assert read.kept == direct.kept == 100
    assert {span for edge in document["edges"] for span in edge["kept_at"]} == {"verb", "rest"}
    table = runner.invoke(app, [*arguments, "-f", "csv"])
    assert table.exit_code == 0, table.stderr
    assert table.stdout.splitlines()[0].endswith("span:verb,span:rest")
    # EAP-IG's graph has no positions: the sums, and the file says so
    graph = json.loads(runner.invoke(app, [*arguments, "-f", "eap-ig"]).stdout)
    assert graph["cfg"]["summed_over_spans"] == ["verb", "rest"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--spans", "text:zebra"], "'zebra' is not in the text"),
        (["--spans", "text:man", "--spans", "text:man walked"], "share token"),
        (["--spans", "a=0-1", "--spans", "a=2"], "names 'a' twice"),
        (["--spans", "rest=0"], "holds every position no span names"),
        (["--spans", "0-99"], "there are 7 tokens"),
        (["--by-position", "--spans", "0"], "not both"),
        (["--by-position", "--method", "optimize"], "not yet with --method optimize"),
        (["--spans", "0", "--select", "ilp"], "not yet with --select ilp"),
        (["--spans", "0", "--select", "greedy"], "not yet with --select greedy"),
        (["--by-position", "--level", "node"], "not yet with --level node"),
    ],
)
def test_bad_spans_are_one_line(runner, generators, extra, message):
    arguments = [
        "circuit", PAIR["text"], "--answer", PAIR["answer"], "--versus", PAIR["versus"],
        "--corrupt", PAIR["corrupt"], "--model", str(generators["llama-lm"]), *extra,
    ]  # fmt: skip
    result = runner.invoke(app, arguments)
    failed_in_process(result, 2, message)


def test_by_position_refuses_pairs_of_two_lengths_naming_the_pair(runner, generators, tmp_path):
    longer = {**OTHER, "text": OTHER["text"] + " then", "corrupt": OTHER["corrupt"] + " then"}
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(pair) for pair in (PAIR, longer)), encoding="utf-8")
    result = runner.invoke(
        app,
        ["circuit", "--pairs", str(pairs), "--model", str(generators["llama-lm"]), "--by-position"],
    )
    failed_in_process(result, 2, "line 2: ")
    assert "give --spans" in result.stderr


def _span_positions(path, text: str, wanted: str, tokens: int) -> list[list[int]]:
    """A span's positions (by the tokenizer's offsets) and the rest's."""
    spanned = _covering(path, text, wanted)
    return [spanned, [p for p in range(tokens) if p not in spanned]]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_circuit_by_span_carries_the_corrupted_value_where_an_edge_is_not_kept(
    generators, language_models, family
):
    """The top (edge, span) pairs by |share|, pruned span by span, equal the reference's;
    the faithfulness of each circuit equals the plain hooks' run with each edge outside
    it at a span carrying the corrupted value at that span's positions; and it is no
    edge circuit's: not the union's, nor the intersection's."""
    extractor, model, ids, corrupt_ids, answer_id, versus_id = pair_ids(
        generators, language_models, PAIR, family
    )
    circuit = extractor.circuit(
        **PAIR, method="exact", spans=["text:man walked"], edges=40, curve=[15, 120]
    )
    positions = _span_positions(generators[family], PAIR["text"], "man walked", ids.shape[1])
    shape = reference.shape_of(model)
    shares = _shares(circuit)
    owned = reference.owners(*shape[:3])
    in_order = reference.nodes_of_shape(*shape[:3])[2]  # the graph's order
    ranked = sorted(
        ((edge, k) for edge in in_order for k in range(2)),
        key=lambda pair: -abs(shares[pair[0]][pair[1]]),
    )
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    tolerance = model_tolerance(model.config) / abs(clean - corrupt_metric)
    names = circuit.graph.upstream, circuit.graph.downstream
    held = circuit.scored.in_graph
    for asked, faithfulness in [(40, circuit.faithfulness)] + [
        (point.asked, point.faithfulness) for point in circuit.curve
    ]:
        kept = reference.prune_by_span(set(ranked[:asked]), owned)
        carried = {
            edge: [p for k in range(2) if (edge, k) not in kept for p in positions[k]]
            for edge in in_order
        }
        metric = reference.span_carried_metric(
            model, ids, corrupt, answer_id, versus_id, {e: p for e, p in carried.items() if p}
        )
        assert abs(faithfulness - (metric - corrupt_metric) / (clean - corrupt_metric)) <= tolerance
        if asked == 40:
            found = {
                ((names[0][u], names[1][d]), k) for k, u, d in zip(*np.nonzero(held), strict=True)
            }
            assert found == kept
            # partial: some edge is kept at one span and not the other
            assert {edge for edge, _ in kept} != {e for e, k in kept if (e, 1 - k) in kept}
    edge_circuit = extractor.circuit(**PAIR, method="exact", edges=40)
    assert abs(edge_circuit.faithfulness - circuit.faithfulness) > 100 * tolerance


def test_a_circuit_keeping_each_edge_at_every_span_is_the_edge_circuit(generators, language_models):
    from attnviz.circuits.options import CircuitOptions
    from attnviz.circuits.passes import Here
    from attnviz.inputs import Input
    from attnviz.request import Request

    extractor = language_models["gemma3-lm"]
    edge_circuit = extractor.circuit(**PAIR, edges=25, prune=False)
    options = CircuitOptions(spans=("text:man",))
    phases = Here(extractor, Request(maps=False, circuit=options), [Input(**PAIR)], None)
    mask = edge_circuit.in_graph  # (U, N)
    whole = phases.measured(mask[None])
    by_span = phases.measured(np.broadcast_to(mask, (2, *mask.shape))[None].copy())
    assert by_span.tolist() == whole.tolist()  # to the last digit
    assert 0 < mask.sum() < edge_circuit.graph.count  # a circuit, not every edge or none


def _own(pair: dict, spans: dict) -> dict:
    return {**pair, "spans": spans}


def test_pairs_own_spans_are_read_at_each_pairs_own_positions(
    runner, generators, language_models, tmp_path
):
    family = "gemma3-lm"
    path, extractor = generators[family], language_models[family]
    roles = [_own(PAIR, {"subject": "man", "because": "because"})]
    roles.append(_own(OTHER, {"because": "because", "subject": "dog"}))  # another order
    found = extractor.circuit(pairs=roles, edges=0)
    assert found.scored.spans == ("subject", "because", "rest")
    # each pair alone, its subject named by --spans: the dataset's score is their mean
    alone = [
        extractor.circuit(**pair, edges=0, spans=[f"subject=text:{word}", "because=text:because"])
        for pair, word in ((PAIR, "man"), (OTHER, "dog"))
    ]
    expected = (alone[0].scored.by_span + alone[1].scored.by_span) / 2
    tolerance = model_tolerance(extractor.loaded.model.config)
    np.testing.assert_allclose(found.scored.by_span, expected, atol=tolerance)
    # not the schema of one text for both: the second pair's subject lies elsewhere
    same = extractor.circuit(
        pairs=[PAIR, OTHER], edges=0, spans=["subject=text:man", "because=text:because"]
    )
    assert np.abs(same.scored.by_span - found.scored.by_span).max() > 100 * tolerance
    # [start, end) in tokens, as the tokenizer's offsets place the words, is the same split
    placed = []
    for pair, words in zip((PAIR, OTHER), (("man", "because"), ("dog", "because")), strict=True):
        covered = [_covering(path, pair["text"], word) for word in words]
        bounds = {
            name: [c[0], c[-1] + 1] for name, c in zip(("subject", "because"), covered, strict=True)
        }
        placed.append(_own(pair, bounds))
    by_tokens = extractor.circuit(pairs=placed, edges=0)
    np.testing.assert_array_equal(by_tokens.scored.by_span, found.scored.by_span)
    # the same through a pairs file, and --spans naming one of them
    pairs = tmp_path / "roles.jsonl"
    pairs.write_text("\n".join(json.dumps(pair) for pair in roles), encoding="utf-8")
    arguments = ["circuit", "--pairs", str(pairs), "--model", str(path), "-f", "json"]
    written = runner.invoke(app, arguments)
    assert written.exit_code == 0, written.stderr
    first = json.loads(written.stdout)["edges"][0]
    assert set(first["by_span"]) == {"subject", "because", "rest"}
    subject = runner.invoke(app, [*arguments, "--spans", "subject"])
    assert subject.exit_code == 0, subject.stderr
    assert json.loads(subject.stdout)["spans"] == ["subject", "rest"]


@pytest.mark.parametrize(
    ("spans", "extra", "message"),
    [
        ([{"subject": "man"}, None], [], 'line 2: its "spans" (none) are not the others'),
        ([{"subject": "man"}, {"object": "dog"}], [], 'line 2: its "spans" (object)'),
        ([{"subject": [2, 2]}, None], [], "line 1: \"spans\" 'subject' is [2, 2): give 0 <="),
        ([[0, 2], None], [], 'line 1: "spans" is an object of'),
        ([{}, None], [], 'line 1: "spans" is an object of'),
        ([{"rest": "man"}, None], [], "\"spans\" names 'rest'"),
        ([{"subject": [0, "2"]}, None], [], "[start, end) in tokens or a text"),
        ([{"a": "man"}, {"a": "dog"}], ["--spans", "b"], "'b' is none of the pair's own"),
        ([{"a": [0, 3], "b": [2, 4]}, {"a": [0, 1], "b": [1, 2]}], [], "share token 2"),
        ([{"a": [0, 99]}, {"a": [0, 1]}], [], "line 1: "),
        ([{"a": "zebra"}, {"a": "dog"}], [], "'zebra' is not in the text"),
        ([{"a": "man"}, {"a": "dog"}], ["--by-position"], "--by-position would not read them"),
        ([{"a": "man"}, {"a": "dog"}], ["--select", "greedy"], "not yet with --select greedy"),
    ],
)
def test_bad_own_spans_are_one_line_naming_the_pair(
    runner, generators, tmp_path, spans, extra, message
):
    lines = [
        pair if own is None else _own(pair, own)
        for pair, own in zip((PAIR, OTHER), spans, strict=True)
    ]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    model = str(generators["llama-lm"])
    result = runner.invoke(app, ["circuit", "--pairs", str(pairs), "--model", model, *extra])
    failed_in_process(result, 2, message)


def test_spans_whose_scores_cannot_fit_are_refused_before_any_pass(runner, generators, monkeypatch):
    from attnviz.memory import Room

    arguments = [
        "circuit", PAIR["text"], "--answer", PAIR["answer"], "--versus", PAIR["versus"],
        "--corrupt", PAIR["corrupt"], "--model", str(generators["llama-lm"]), "--by-position",
    ]  # fmt: skip
    monkeypatch.setattr("attnviz.memory.room", lambda: Room(2**10, "available"))

    def no_pass(*arguments, **options):
        raise AssertionError("a pass ran")

    with monkeypatch.context() as patched:
        patched.setattr("attnviz.circuits.passes.read_twins", no_pass)  # every pair's runs
        failed_in_process(runner.invoke(app, arguments), 2, "scores split by 7 spans need")
    # the same with the room they need
    monkeypatch.setattr("attnviz.memory.room", lambda: Room(2**40, "available"))
    fitted = runner.invoke(app, arguments)
    assert fitted.exit_code == 0, fitted.stderr


def test_a_split_circuit_read_back_by_scores_chooses_and_measures_as_scored(
    runner, generators, language_models, tmp_path
):
    path = generators["llama-lm"]
    pair = [
        "circuit", PAIR["text"], "--answer", PAIR["answer"], "--versus", PAIR["versus"],
        "--corrupt", PAIR["corrupt"], "--model", str(path),
    ]  # fmt: skip
    spans = ["--spans", "verb=text:walked"]
    written = runner.invoke(app, [*pair, *spans, "-f", "json"])
    assert written.exit_code == 0, written.stderr
    file = tmp_path / "split.json"
    file.write_text(written.stdout, encoding="utf-8")
    # its own pairs, another size and curve: as scoring them again would choose and measure
    asked = ["--edges", "30", "--curve", "10,60", "-f", "json"]
    again = runner.invoke(
        app, ["circuit", "--model", str(path), "--scores", str(file), *spans, *asked]
    )
    assert again.exit_code == 0, again.stderr
    (tmp_path / "again.json").write_text(again.stdout, encoding="utf-8")
    read = Circuit.load(tmp_path / "again.json")
    direct = language_models["llama-lm"].circuit(
        **PAIR, spans=["verb=text:walked"], edges=30, curve=[10, 60]
    )
    assert read.scored.spans == ("verb", "rest") and read.kept == direct.kept > 0
    assert (read.scored.in_graph == direct.scored.in_graph).all()  # (K, U, N)
    assert read.faithfulness == pytest.approx(direct.faithfulness, abs=1e-5)
    curve = [point.faithfulness for point in read.curve]
    assert curve == pytest.approx([point.faithfulness for point in direct.curve], abs=1e-5)
    assert len({point.faithfulness for point in direct.curve} | {direct.faithfulness}) == 3
    for bad, message in [
        ([], "is split by the spans verb, rest: give the --spans it was scored with"),
        (["--spans", "noun=text:dog"], "scored with, not noun, rest"),
    ]:
        refused = runner.invoke(app, ["circuit", "--model", str(path), "--scores", str(file), *bad])
        failed_in_process(refused, 2, message)
    whole = tmp_path / "whole.json"
    whole.write_text(runner.invoke(app, [*pair, "-f", "json"]).stdout, encoding="utf-8")
    refused = runner.invoke(app, ["circuit", "--model", str(path), "--scores", str(whole), *spans])
    failed_in_process(refused, 2, "holds each edge's score over every position")


def test_bootstrapped_scores_by_span_hold_each_shares_sign_over_the_resamples(
    generators, language_models
):
    """--bootstrap B with --spans: each (edge, span) share bootstrapped as an edge's score
    is (circuits/bootstrap's draws: numpy's default_rng(0) multinomial), the edge's score
    the sum of its shares."""
    extractor = language_models["llama-lm"]
    pairs, spans = [PAIR, OTHER, THIRD], ["1-3"]
    circuit = extractor.circuit(pairs=pairs, spans=spans, bootstrap=7, edges=10)
    alone = np.stack(
        [extractor.circuit(pairs=[pair], spans=spans, edges=0).scored.by_span for pair in pairs]
    )  # (pairs, K, U, N)
    draws = np.random.default_rng(0).multinomial(3, [1 / 3] * 3, size=7)  # (B, pairs)
    means = np.einsum("bi,ikun->bkun", draws, alone) / 3
    held = (means > 0).all(0) | (means < 0).all(0)
    edges = np.broadcast_to(circuit.graph.edges, held.shape)
    assert held[edges].any() and not held[edges].all()  # some signs turn with the draws
    expected = np.where(held, means.mean(0), 0.0)
    tolerance = model_tolerance(extractor.loaded.model.config)
    np.testing.assert_allclose(circuit.scored.by_span, expected, atol=tolerance)
    np.testing.assert_allclose(circuit.scores, expected.sum(0), atol=tolerance)
    # the edge's score is not its own bootstrap: a share whose sign turns is left out alone
    whole = extractor.circuit(pairs=pairs, bootstrap=7, edges=0)
    assert np.abs(whole.scores - circuit.scores).max() > 100 * tolerance
    assert circuit.bootstrap == 7 and circuit.scored.in_graph.shape == expected.shape


def test_a_circuit_by_span_is_drawn_with_each_pair_in_its_spans_column(
    runner, generators, language_models, tmp_path
):
    from attnviz.render.circuit import circuit_drawing
    from attnviz.render.style import Style

    spans = ["subject=text:man", "verb=text:walked"]
    circuit = language_models["llama-lm"].circuit(**PAIR, spans=spans, edges=40)
    figure, _ = circuit_drawing(circuit, Style())
    lines = figure.axes[0].lines
    kept = circuit.scored.in_graph  # (K, U, N)
    assert len(lines) == circuit.kept == int(kept.sum()) > 0
    drawn = np.zeros(len(circuit.scored.spans), dtype=int)
    for line in lines:
        columns = {int(np.floor(x)) for x in line.get_xdata()}  # span k's column: [k, k + 1)
        assert len(columns) == 1  # both ends in one span's column
        drawn[columns.pop()] += 1
    assert drawn.tolist() == kept.sum(axis=(1, 2)).tolist()
    assert (drawn > 0).sum() >= 2  # more than one span holds some
    ticks = [label.get_text() for label in figure.axes[0].get_xticklabels()]
    assert ticks == ["subject", "verb", "rest"]
    picture = tmp_path / "spans.png"
    arguments = [
        "circuit", PAIR["text"], "--answer", PAIR["answer"], "--versus", PAIR["versus"],
        "--corrupt", PAIR["corrupt"], "--model", str(generators["llama-lm"]),
        "--spans", spans[0], "--picture", str(picture),
    ]  # fmt: skip
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")


def test_refined_edges_by_span_take_each_spans_exact_patch(generators, language_models):
    """--refine R with --spans: the estimate's top R edges computed exactly, the edge's
    whole patch and each span's of its own (as --method exact --spans measures them, held
    to plain hooks above); every other edge keeps the estimate's shares."""
    extractor = language_models["llama-lm"]
    spans = ["text:man walked"]
    estimate = extractor.circuit(**PAIR, spans=spans, edges=0)
    refined = extractor.circuit(**PAIR, spans=spans, refine=12, edges=0)
    exact = extractor.circuit(**PAIR, spans=spans, method="exact", edges=0)
    chosen = refined.scored.exact  # (U, N) the refined edges
    assert chosen is not None and chosen.sum() == 12
    upstream, downstream = estimate.scored.ranked()
    top = np.zeros_like(chosen)
    top[upstream[:12], downstream[:12]] = True
    assert (chosen == top).all()  # the estimate's top 12 by |score|
    tolerance = model_tolerance(extractor.loaded.model.config)
    np.testing.assert_allclose(refined.scores[chosen], exact.scores[chosen], atol=tolerance)
    by_span, exact_by_span = refined.scored.by_span, exact.scored.by_span
    np.testing.assert_allclose(by_span[:, chosen], exact_by_span[:, chosen], atol=tolerance)
    np.testing.assert_allclose(
        by_span[:, ~chosen], estimate.scored.by_span[:, ~chosen], atol=tolerance
    )  # from another run's record (read for exact sweeps too): equal to float32 rounding
    # not the estimate's own shares where refined
    assert np.abs(by_span[:, chosen] - estimate.scored.by_span[:, chosen]).max() > 100 * tolerance


@pytest.mark.parametrize("shape", [(2, 4, 2), (3, 2, 2)])
def test_pruning_by_span_equals_the_reference_on_random_circuits(shape):
    """Dead ends out span by span, on random (edge, span) masks: equal to the reference's
    set-by-set pruning; some circuits lose pairs the union's pruning would keep (a node
    fed at one span only), and some keep a pair fed through a key or value at another
    span, which pruning each span alone would drop."""
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.selections import pruned, pruned_by_span

    graph, owned, spans = Graph(*shape), reference.owners(*shape), 3
    generator = np.random.default_rng(sum(shape))
    names = graph.upstream, graph.downstream
    beyond_union = across_spans = 0
    for density in (0.05, 0.15, 0.3, 0.6) * 10:
        mask = graph.edges[None] & (generator.random((spans, *graph.edges.shape)) < density)
        found = pruned_by_span(graph, mask)
        as_pairs = {
            ((names[0][u], names[1][d]), k) for k, u, d in zip(*np.nonzero(found), strict=True)
        }
        given = {((names[0][u], names[1][d]), k) for k, u, d in zip(*np.nonzero(mask), strict=True)}
        assert as_pairs == reference.prune_by_span(given, owned), density
        beyond_union += int((found != (mask & pruned(graph, mask.any(0))[None])).any())
        alone = np.stack([pruned(graph, mask[k]) for k in range(spans)])
        across_spans += int((found & ~alone).any())
    assert beyond_union and across_spans
    # the same mask at every span: the edge circuit's pruning at each
    mask = graph.edges & (generator.random(graph.edges.shape) < 0.3)
    same = pruned_by_span(graph, np.broadcast_to(mask, (spans, *mask.shape)).copy())
    assert (same == pruned(graph, mask)[None]).all()


@pytest.mark.parametrize("select", ["top", "signed"])
def test_ungrouped_pairs_by_span_are_ranked_a_copy_at_a_time(language_models, select):
    """--count ungrouped with --spans: each (edge, span) pair counted as its edge's copies
    (a key/value input once per query head, as MIB's graph has it), each copy an equal
    part of the share, ranked copy by copy (ties in the graph's order, span by span) as
    EAP-IG's apply_topn ranks MIB's edges; a pair kept where any copy is in the top N."""
    extractor = language_models["llama-lm"]
    spans = ["text:man walked"]
    circuit = extractor.circuit(
        **PAIR, spans=spans, count="ungrouped", select=select, edges=30, prune=False
    )
    graph, by_span = circuit.graph, circuit.scored.by_span
    copies = graph.copies(circuit.scored.count)
    assert copies.max() > 1  # grouped heads: some inputs are counted several times
    ranked = []
    for u, d in zip(*graph.edge_list(), strict=True):
        for k in range(len(circuit.scored.spans)):
            part = by_span[k, u, d] / copies[u, d]
            ranked += [((u, d, k), -part if select == "signed" else abs(part))] * copies[u, d]
    ranked.sort(key=lambda item: -item[1])  # stable: the graph's order, span by span
    expected = {pair for pair, _ in ranked[:30]}
    kept = circuit.scored.in_graph
    assert {(u, d, k) for k, u, d in zip(*np.nonzero(kept), strict=True)} == expected
    assert circuit.kept == sum(copies[u, d] for u, d, _ in expected) >= 30
    grouped = extractor.circuit(**PAIR, spans=spans, select=select, edges=30, prune=False)
    assert (grouped.scored.in_graph != kept).any()  # counted as the model's, another circuit


@pytest.mark.parametrize(
    ("asked", "method"),
    [
        ({"ablation": "zero", "corrupt": None}, "gradient"),
        ({"ablation": "zero", "corrupt": None}, "ig"),
        ({"ablation": "mean", "pairs": [OTHER, {**OTHER, "text": OTHER["corrupt"]}]}, "gradient"),
        ({"metric": "prob", "versus": None}, "gradient"),
        ({"metric": "prob_difference"}, "ig"),
        ({"metric": "kl", "versus": None}, "ig"),
        ({"versus": None}, "relp"),
    ],
)
def test_every_intervention_and_metric_splits_by_position_into_its_own_scores(
    language_models, asked, method
):
    """By position, under each intervention and metric: the shares add up to the score
    the edge has without spans (held to plain hooks for each of them in
    test_circuit_ablation.py and test_circuit.py), and they are a split, not a copy."""
    extractor = language_models["llama-lm"]
    given = {**PAIR, **asked}
    if "pairs" in given:  # a mean over a dataset of its own, whose pairs read alike
        given = {"pairs": [{**pair, "corrupt": None} for pair in given["pairs"]]}
        given |= {"ablation": asked["ablation"]}
    steps = {"steps": 3} if method == "ig" else {}
    split = extractor.circuit(**given, method=method, by_position=True, edges=0, **steps)
    whole = extractor.circuit(**given, method=method, edges=0, **steps)
    # float32's rounding, relative to the terms added (a probability's change is small)
    by_span, scale = split.scored.by_span, float(np.abs(whole.scores).max())
    tolerance = 4 * model_tolerance(extractor.loaded.model.config) * float(np.abs(by_span).max())
    assert by_span.shape[0] > 1 and scale > 0
    np.testing.assert_allclose(by_span.sum(0), whole.scores, atol=tolerance)
    # (U, N): the positions carrying a hundredth of the largest score or more, each edge
    carried = (np.abs(by_span) > scale / 100).sum(0)
    assert carried.max() > 1
