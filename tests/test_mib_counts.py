"""--count ungrouped: a circuit's edges counted as MIB's graph counts them (hannamw/
MIB-circuit-track, commit b759df3: TransformerLens's graph with
``ungroup_grouped_query_attention``, a key and a value input for every query head), held
to EAP-IG's ``apply_topn`` written here over the copies ``-f eap-ig`` writes, each copy
taken back to the grouped edge it is a copy of."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.circuits.circuit import Circuit
from attnviz.circuits.eap_ig import eap_ig_document
from attnviz.circuits.selections import selected
from tests import circuit_references as reference
from tests.checks import model_tolerance
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS, prepared

MIB_FRACTIONS = [percent / 100 for percent in reference.MIB_PERCENT]


def mibs_edge_count(layers, heads):
    """MIB's graph's edges, every query head reading its own key and value: the tests'
    reference graph of a model with as many key/value heads as query heads."""
    return len(reference.nodes_of_shape(layers, heads, heads)[2])


def grouped_edge(name, group):
    """The grouped edge (upstream, downstream) an EAP-IG edge name is a copy of."""
    parent, child = name.split("->")
    if "<" not in child:
        return parent, child
    head, letter = child[:-1].split("<")
    layer, number = head.split(".h")
    if letter == "q":
        return parent, f"{head}.q"
    return parent, f"{layer}.kv{int(number) // group}.{letter}"


def apply_topn(edges, count, signed=False):
    """EAP-IG's ``Graph.apply_topn(count, absolute=not signed)``: the ``count`` edges of
    largest |score| (of largest score, ``signed``), as names; None where the count falls
    inside a run of equal scores of different grouped edges (any of them could be taken)."""
    ranked = sorted(edges, key=lambda name: -(edges[name] if signed else abs(edges[name])))
    taken = ranked[:count]
    if 0 < count < len(ranked):
        last, first_left = taken[-1], ranked[count]
        value = (lambda name: edges[name]) if signed else (lambda name: abs(edges[name]))
        if value(last) == value(first_left) and last.split("<")[0] != first_left.split("<")[0]:
            return None
    return taken


@pytest.mark.parametrize("select", ["top", "signed"])
def test_ungrouped_sizes_and_circuits_are_mibs_top_n_of_the_copies(language_models, select):
    """On the tiny Llama (grouped query heads): the graph counts MIB's edges, the curve's
    sizes are int(fraction × that), and each circuit holds every grouped edge of which
    EAP-IG's top n copies hold one, counted as all its copies."""
    extractor = language_models["llama-lm"]
    circuit = extractor.circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, curve=["mib"], count="ungrouped", select=select
    )
    layers, heads, kv, _ = reference.shape_of(extractor.loaded.model)
    group = heads // kv
    assert group > 1  # the model groups its heads: the counts differ
    count = mibs_edge_count(layers, heads)
    assert count > circuit.graph.count and circuit.scored.counted == count
    written = eap_ig_document(circuit)["edges"]
    assert len(written) == count
    copies = {name: edge["score"] for name, edge in written.items()}  # MIB's sign
    own = [point for point in circuit.curve if point.select == select]
    assert [point.asked for point in own] == [int(f * count) for f in MIB_FRACTIONS]
    compared = 0
    for point in own:
        taken = apply_topn(copies, point.asked, signed=select == "signed")
        if taken is None:
            continue
        expected = {grouped_edge(name, group) for name in taken}
        chosen = selected(circuit.scored, select, point.asked, prune=False)
        found = {(row.upstream, row.downstream) for row in chosen.rows(held=True)}
        assert found == expected, point.asked
        weight = sum(group if then.endswith((".k", ".v")) else 1 for _, then in expected)
        assert chosen.kept == weight
        compared += 1
    assert compared >= 6


def test_an_ungrouped_circuit_reads_back_counted_so_and_a_model_without_groups_is_said(
    language_models, tmp_path
):
    """-f json keeps the count, and the file read back sizes the same circuits; a model
    whose heads are not grouped is counted alike, said once."""
    import warnings

    extractor = language_models["llama-lm"]
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=40, count="ungrouped")
    document = circuit.document()
    assert document["circuit"]["count"] == "ungrouped"
    path = tmp_path / "ungrouped.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    read = Circuit.load(path)
    assert read.scored.count == "ungrouped" and read.kept == circuit.kept
    again = extractor.circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=40, count="ungrouped", scores=str(path)
    )
    assert again.kept_edges() == circuit.kept_edges()
    grouped = extractor.circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=40)
    assert grouped.kept_edges() != circuit.kept_edges()  # the count changes the circuit
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        alike = language_models["gpt2-lm"].circuit(
            TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=40, count="ungrouped"
        )
    told = [str(each.message) for each in said if "counted as MIB counts" in str(each.message)]
    assert len(told) == 1
    plain = language_models["gpt2-lm"].circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=40)
    assert alike.kept_edges() == plain.kept_edges()


def test_the_command_counts_ungrouped_edges_in_its_table(runner, generators, language_models):
    from attnviz.cli import app

    twins = ["--answer", ANSWER, "--versus", VERSUS, "--corrupt", CORRUPT]
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *twins, "--edges", "40"]
    result = runner.invoke(app, [*common, "--count", "ungrouped", "--width", "200"])
    assert result.exit_code == 0, result.stderr
    expected = language_models["llama-lm"].circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=40, count="ungrouped"
    )
    assert f"circuit of {expected.kept:,} of {expected.scored.counted:,} ungrouped edges" in (
        result.stdout
    )
    # what a low faithfulness suggests is what --count ungrouped takes
    assert "or --curve to see where it rises" in result.stderr
    assert "--select greedy" not in result.stderr and "try more --edges, or" in result.stderr


@pytest.mark.parametrize(("shape", "sizes"), [((1, 3, 1), range(15)), ((2, 2, 1), range(5))])
def test_ilp_is_the_largest_circuit_without_a_dead_end_found_by_trying_every_one(shape, sizes):
    """--select ilp on random scores: exactly N edges, none a dead end, of the largest
    summed |score| of any such N, as trying every set of N edges finds them (every N of a
    one-layer graph; up to four of a two-layer one)."""
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.scored import ScoredGraph

    graph = Graph(*shape)
    scores = np.where(graph.edges, np.random.default_rng(7).normal(size=graph.edges.shape), 0.0)
    named = {
        (graph.upstream[u], graph.downstream[d]): float(scores[u, d])
        for u, d in zip(*graph.edge_list(), strict=True)
    }
    differs_from_top = 0
    for size in sizes:
        if size > graph.count:
            continue
        chosen = selected(ScoredGraph(graph, scores), "ilp", size, prune=False)
        found = {(row.upstream, row.downstream) for row in chosen.rows(held=True)}
        assert found == reference.ilp_edges(shape, named, size), size
        assert selected(ScoredGraph(graph, scores), "ilp", size).circuit.sum() == size  # whole
        top = reference.chosen(shape, named, "top", size, True)
        differs_from_top += top != found
    assert differs_from_top >= 2  # the program is no pruned top-N


@pytest.mark.parametrize("family", ["llama-lm", "gemma3-lm"])
def test_an_ilp_circuit_of_a_model_is_whole_and_measured_as_the_hooks_measure_it(
    generators, language_models, family
):
    """On the tiny models (too many edges to try every set): each ILP circuit holds exactly
    its size, has no dead end, keeps at least the |score| of the pruned top circuit of as
    many edges, and its faithfulness is the plain hooks' run of it."""
    extractor, model, (ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus=True
    )
    circuit = extractor.circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=12, curve=[4, 30], select="ilp"
    )
    scores = {(first, then): score for first, then, score in circuit.edges()}
    owned = reference.owners(*reference.shape_of(model)[:3])
    clean = reference.run(model, ids, answer_id, versus_id)[0]
    corrupt_metric, corrupt = reference.run(model, corrupt_ids, answer_id, versus_id)
    _, _, every_edge = reference.nodes(model)
    tolerance = model_tolerance(model.config) / abs(clean - corrupt_metric)

    def held(scored):
        return {(row.upstream, row.downstream) for row in scored.rows(held=True)}

    measured = [(12, held(circuit.scored), circuit.faithfulness)]
    measured += [
        (point.asked, held(selected(circuit.scored, "ilp", point.asked)), point.faithfulness)
        for point in circuit.curve
    ]
    for size, kept, faithfulness in measured:
        assert len(kept) == size and reference.prune(kept, owned) == kept
        top = reference.chosen(reference.shape_of(model)[:3], scores, "top", size, True)
        assert sum(abs(scores[edge]) for edge in kept) >= sum(abs(scores[e]) for e in top)
        outside = [edge for edge in every_edge if edge not in kept]
        metric = reference.carried_metric(model, ids, corrupt, answer_id, versus_id, outside)
        expected = (metric - corrupt_metric) / (clean - corrupt_metric)
        assert abs(faithfulness - expected) <= tolerance, size


def test_ilp_on_a_graph_past_its_size_is_refused_before_any_pass(language_models, monkeypatch):
    from attnviz.circuits import ilp
    from attnviz.circuits.passes import Here
    from attnviz.errors import UsageError

    monkeypatch.setattr(ilp, "MOST_ILP_EDGES", 50)

    def no_pass(*_args, **_kwargs):
        raise AssertionError("a pass ran")

    monkeypatch.setattr(Here, "scored", no_pass)
    with pytest.raises(UsageError, match=r"more than the 50 it is set up for; give --select"):
        language_models["llama-lm"].circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, select="ilp")
