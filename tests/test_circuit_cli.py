"""`attnviz circuit` on the command line: its table, data and picture (the same numbers as
`Extractor.circuit`), a dataset of pairs from a JSONL file, and its usage errors: one
line, exit 2, nothing written."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import numpy as np
import pytest

from attnviz.circuits.circuit import Circuit
from attnviz.cli import app
from tests.checks import failed_in_process, model_tolerance
from tests.circuit_references import OTHER, PAIR, mib_fractions
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS

TWINS = ["--answer", ANSWER, "--versus", VERSUS, "--corrupt", CORRUPT]


def test_the_table_json_and_csv_say_the_circuit(runner, generators, language_models):
    path = generators["llama-lm"]
    common = ["circuit", TEXT, "--model", path, *TWINS, "--edges", "9", "--curve", "0,30"]
    drawn = runner.invoke(app, [*common, "--rows", "5", "--width", "120"])
    assert drawn.exit_code == 0, drawn.stderr
    expected = language_models["llama-lm"].circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=9, curve=[0, 30]
    )
    low = expected.faithfulness < 0.1  # said in one line
    assert drawn.stderr.count("\n") == low and ("faithfulness below 0.1" in drawn.stderr) == low
    (first, then, _), *_ = expected.edges(1)
    assert first in drawn.stdout and then in drawn.stdout
    kept = f"circuit of {expected.kept} of {expected.graph.count} edges (top 9, dead ends pruned)"
    assert f"{kept}: faithfulness" in drawn.stdout
    share = f"{30 / expected.graph.count:.1%}"
    assert f"30 asked ({share}), {expected.curve[1].kept} kept: faithfulness" in drawn.stdout
    document = json.loads(runner.invoke(app, [*common, "-f", "json"]).stdout)
    assert {"clean_metric", "corrupt_metric", "nodes", "edges", "circuit", "curve"} <= set(document)
    assert len(document["edges"]) == expected.graph.count
    scores = {(edge["from"], edge["to"]): edge["score"] for edge in document["edges"]}
    tolerance = model_tolerance(language_models["llama-lm"].loaded.model.config)
    for edge_from, edge_to, score in expected.edges():
        assert abs(scores[edge_from, edge_to] - score) <= tolerance
    said = document["circuit"]
    assert (said["select"], said["asked"], said["prune"]) == ("top", 9, True)
    assert len(said["edges"]) == said["kept"] == expected.kept
    assert sum(edge["in_circuit"] for edge in document["edges"]) == expected.kept
    assert abs(said["faithfulness"] - expected.faithfulness) <= 1e-4
    assert [point["asked"] for point in document["curve"]] == [0, 30]
    assert [point["kept"] for point in document["curve"]] == [0, expected.curve[1].kept]
    assert [point["fraction"] for point in document["curve"]] == [0, 30 / expected.graph.count]
    assert document["cpr"] is None and document["cmd"] is None  # no MIB curve
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, [*common, "-f", "csv"]).stdout)))
    assert len(rows) == expected.graph.count
    assert sum(row["in_circuit"] == "True" for row in rows) == expected.kept
    assert [int(row["rank"]) for row in rows] == list(range(1, len(rows) + 1))


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_the_picture_is_written(runner, generators, tmp_path, suffix):
    picture = tmp_path / f"circuit.{suffix}"
    common = ["circuit", TEXT, "--model", generators["gemma2-lm"], *TWINS, "--curve", "0,10"]
    result = runner.invoke(app, [*common, "--edges", "8", "--picture", str(picture)])
    assert result.exit_code == 0, result.stderr
    table = runner.invoke(app, [*common, "--edges", "8"]).stdout
    assert result.stdout == table and "faithfulness" in table  # the picture beside the table
    head = picture.read_bytes()[:100]
    assert head.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in picture.read_bytes()


def _write_pairs(folder, lines):
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_pairs_give_the_mean_over_the_dataset(runner, generators, language_models, tmp_path):
    path = generators["llama-lm"]
    pairs = _write_pairs(tmp_path, [PAIR, OTHER])
    result = runner.invoke(app, ["circuit", "--pairs", pairs, "--model", path, "-f", "json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["pairs"] == 2
    expected = language_models["llama-lm"].circuit(pairs=[PAIR, OTHER])
    found = {(edge["from"], edge["to"]): edge["score"] for edge in document["edges"]}
    alike = [abs(found[first, then] - score) for first, then, score in expected.edges()]
    assert max(alike) <= model_tolerance(language_models["llama-lm"].loaded.model.config)
    assert not np.isclose(document["clean_metric"], language_models["llama-lm"].circuit(
        **PAIR, edges=0
    ).clean_metric)  # fmt: skip


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([PAIR, {**OTHER, "corrupt": "The dog"}], "pairs.jsonl, line 2: the corrupted text is"),
        ([PAIR, {**OTHER, "versus": None}], "line 2: every pair is measured alike"),
        ([{"text": TEXT, "answer": ANSWER}], 'line 1 has no "corrupt"'),
        ([PAIR, {"text": 3}], 'line 2 has no "text" string'),
        ([], "holds no pairs"),
    ],
)
def test_bad_pairs_are_named_by_their_line(runner, generators, tmp_path, lines, message):
    pairs = _write_pairs(tmp_path, lines)
    result = runner.invoke(app, ["circuit", "--pairs", pairs, "--model", generators["llama-lm"]])
    failed_in_process(result, 2, message)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--answer", ANSWER], "give --answer and --corrupt"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--edges", "100000"], "more edges than"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--curve", "5,100000"], "--curve 100000"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--steps", "0"], "--steps"),
        (
            ["--corrupt", CORRUPT, "--answer", ANSWER, "--method", "exact", "--refine", "3"],
            "--refine",
        ),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--steps", "3"], "--method ig"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--edges", "some"], "--edges is a number"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--curve", "5,x"], "--curve is numbers"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--curve", "mib,5"], "give it alone"),
        (
            ["--corrupt", CORRUPT, "--answer", ANSWER, "--curve", "mib", "--edges", "5"],
            "leave out --edges",
        ),
        (
            [
                *("--corrupt", CORRUPT, "--answer", ANSWER, "--curve", "mib"),
                "--level",
                "node",
                "--nodes",
                "5",
            ],
            "leave out --nodes",
        ),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--bootstrap", "1"], "--bootstrap is a"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--bootstrap", "201"], "at most 200"),
        (
            ["--corrupt", CORRUPT, "--answer", ANSWER, "--bootstrap", "5", "--refine", "3"],
            "not with --bootstrap",
        ),
        (
            ["--corrupt", CORRUPT, "--answer", ANSWER, "--bootstrap", "5", "--scores", "c.json"],
            "not with --scores",
        ),
        (["--corrupt", "The dog", "--answer", ANSWER], "the corrupted text is"),
        (["--corrupt", CORRUPT, "--answer", ANSWER, "--sparsity", "1"], "--method optimize's"),
        (
            ["--corrupt", CORRUPT, "--answer", ANSWER, "--method", "optimize", "--refine", "3"],
            "not with --refine",
        ),
        (
            [*TWINS, "--method", "optimize", "--bootstrap", "3"],
            "not with --bootstrap",
        ),
        ([*TWINS, "--method", "optimize", "--level", "node"], "not with --level node"),
        (
            [*TWINS, "--method", "optimize", "--select", "signed"],
            "--method optimize's rank its learned mask, the kept first, all of one sign",
        ),
        ([*TWINS, "--method", "optimize", "--count", "ungrouped"], "not with --count ungrouped"),
        ([*TWINS, "--level", "node", "--count", "ungrouped"], "MIB's nodes either way"),
        ([*TWINS, "--select", "greedy", "--count", "ungrouped"], "--select top or signed with"),
        ([*TWINS, "--select", "ilp", "--count", "ungrouped"], "--select ilp grows the circuit"),
        ([*TWINS, "--select", "ilp", "--level", "node"], "--select ilp chooses edges: --level"),
        ([*TWINS, "--method", "optimize", "--learning-rate", "0"], "--learning-rate is a number"),
        ([*TWINS, "--method", "optimize", "--learning-rate", "nan"], "--learning-rate is a"),
        ([*TWINS, "--method", "optimize", "--sparsity", "-1"], "--sparsity is a number 0 or"),
        ([*TWINS, "--method", "optimize", "--train-steps", "0"], "--train-steps is a whole"),
        ([*TWINS, "--train-each", "--curve", "mib"], "--train-each is --method optimize's"),
        ([*TWINS, "--method", "optimize", "--train-each"], "at each size of the curve: give"),
        (
            [*TWINS, "--method", "optimize", "--train-each", "--curve", "mib", "--sparsity", "1"],
            "--train-each holds each circuit at its size of the curve: not both",
        ),
    ],
)
def test_usage_errors_are_one_line(runner, generators, arguments, message):
    result = runner.invoke(app, ["circuit", TEXT, "--model", generators["llama-lm"], *arguments])
    if "--steps" in arguments and "0" in arguments:  # typer's own range check
        assert result.exit_code == 2 and "--steps" in result.stderr and result.stdout == ""
        return
    failed_in_process(result, 2, message)


def test_models_without_a_next_token_are_refused(runner, tiny):
    result = runner.invoke(app, ["circuit", TEXT, *TWINS])
    failed_in_process(result, 2, "the built-in stack")
    result = runner.invoke(app, ["circuit", TEXT, "--model", tiny["bert"], *TWINS])
    failed_in_process(result, 2, "encoder")


def test_text_and_pairs_are_one_or_the_other(runner, generators, tmp_path):
    pairs = _write_pairs(tmp_path, [PAIR])
    path = generators["llama-lm"]
    result = runner.invoke(app, ["circuit", TEXT, "--pairs", pairs, "--model", path])
    failed_in_process(result, 2, "not both")
    result = runner.invoke(app, ["circuit", "--pairs", pairs, "--model", path, "--answer", "x"])
    failed_in_process(result, 2, "no --answer")


def test_refine_past_the_graph_is_refused_before_any_pass(runner, generators, monkeypatch):
    """As --edges is: one line, exit 2, and not after scoring every edge first."""
    import attnviz.circuits.passes as circuit_module

    def never(*_arguments):
        raise AssertionError("a pass ran before the sizes were checked")

    monkeypatch.setattr(circuit_module, "scored", never)
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS]
    result = runner.invoke(app, [*common, "--refine", "100000"])
    failed_in_process(result, 2, "--refine 100000 is more edges than the model's graph has")
    assert "--method exact" in result.stderr
    for option in ("--edges", "--curve"):
        failed_in_process(runner.invoke(app, [*common, option, "100000"]), 2, "more edges")


def test_curve_all_is_every_edge_and_a_size_asked_twice_is_measured_once(
    runner, generators, monkeypatch
):
    import attnviz.circuits.passes as circuit_module

    measured = []
    original = circuit_module.circuit_metrics

    def counted(twins, kept, told=None):
        measured.append(len(kept))
        return original(twins, kept, told)

    monkeypatch.setattr(circuit_module, "circuit_metrics", counted)
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS, "-f", "json"]
    result = runner.invoke(app, [*common, "--edges", "5", "--curve", "5,all,5,0"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    count = len(document["edges"])
    assert [point["asked"] for point in document["curve"]] == [0, 5, count]
    assert document["curve"][-1]["faithfulness"] == 1.0
    assert document["curve"][1]["faithfulness"] == document["circuit"]["faithfulness"]
    assert measured == [1]  # the circuit of 5 edges: one pass, not one for --edges and one more
    assert json.loads(runner.invoke(app, [*common, "--edges", "all"]).stdout)["curve"] == []


def test_no_output_says_a_negative_zero(runner, generators):
    """The circuit of 0 edges is the corrupted run: faithfulness 0, never -0.0, in either
    order of the twins (one of them has the clean metric below the corrupted one)."""
    path = generators["gemma2-lm"]
    for text, corrupt in ((TEXT, CORRUPT), (CORRUPT, TEXT)):
        common = ["circuit", text, "--model", path, "--answer", ANSWER, "--corrupt", corrupt]
        common += ["--edges", "0", "--curve", "0"]
        for output in ("json", "csv", "table"):
            result = runner.invoke(app, [*common, "-f", output])
            assert result.exit_code == 0, result.stderr
            assert not re.search(r"-0\.0+\b(?![1-9])", result.stdout), (output, result.stdout)
        document = json.loads(runner.invoke(app, [*common, "-f", "json"]).stdout)
        assert math.copysign(1.0, document["circuit"]["faithfulness"]) == 1.0


def test_a_long_circuit_says_its_cost_and_what_costs_less(
    runner, generators, monkeypatch, tmp_path
):
    """Once, after the first pair's first pass, for each pass over the pairs that will
    take over LONG_REST seconds: scoring, refining, measuring."""
    import attnviz.circuits.cost as cost_module

    monkeypatch.setattr(cost_module, "LONG_REST", 0.0)
    pairs = ["--pairs", _write_pairs(tmp_path, [PAIR, OTHER])]
    common = ["circuit", "--model", generators["llama-lm"], *pairs, "--edges", "5", "-f", "json"]
    exact = runner.invoke(app, [*common, "--method", "exact"])
    assert exact.exit_code == 0, exact.stderr
    lines = exact.stderr.splitlines()
    scoring = [line for line in lines if "scoring every edge exactly takes about" in line]
    assert len(scoring) == 1 and "--method gradient (EAP)" in scoring[0]
    assert sum("measuring the faithfulness of 1 circuit takes" in line for line in lines) == 1
    ig = runner.invoke(app, [*common, "--method", "ig", "--steps", "7", "--refine", "3"])
    assert ig.exit_code == 0, ig.stderr
    assert ig.stderr.count("EAP-IG at 7 points a pair takes about") == 1
    assert "--method gradient (EAP) reads one point a pair" in ig.stderr
    assert ig.stderr.count("computing the top 3 edges exactly takes about") == 1
    assert "--steps 5 (the default) costs 1.4× less" in ig.stderr
    assert all(line.startswith("attnviz: warning: ") for line in ig.stderr.splitlines())
    one = runner.invoke(app, [*common, "--method", "ig", "--steps", "1"])
    assert "EAP-IG at 1 point a pair takes about" in one.stderr and "the default" not in one.stderr


def test_a_long_circuits_cost_from_python_names_keywords_at_the_callers_line(
    language_models, monkeypatch
):
    """From Python the advice names Extractor.circuit's keyword arguments, and the warning
    points at the caller's own line (not attnviz's source)."""
    import warnings

    import attnviz.circuits.cost as cost_module
    from attnviz.errors import AttnvizWarning

    monkeypatch.setattr(cost_module, "LONG_REST", 0.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pairs = [PAIR, OTHER]
        language_models["llama-lm"].circuit(pairs=pairs, method="ig", steps=7, edges=5)
    costs = [each for each in caught if "EAP-IG at 7 points" in str(each.message)]
    assert len(costs) == 1 and costs[0].category is AttnvizWarning
    said = str(costs[0].message)
    assert 'method="gradient" (EAP)' in said and "steps=5 (the default)" in said
    assert "--" not in said
    assert costs[0].filename == __file__


def test_steps_have_an_upper_bound(runner, generators):
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS, "--method", "ig"]
    failed_in_process(runner.invoke(app, [*common, "--steps", "1001"]), 2, "--steps is at most")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--select", "best"], "--select"),
        (["--threshold", "0.1"], "--threshold is --select threshold's"),
        (["--select", "threshold"], "give --threshold T"),
        (["--select", "threshold", "--threshold", "-1"], "0 or more"),
        (["--select", "threshold", "--threshold", "0.1", "--edges", "5"], "--edges counts"),
        (["--select", "threshold", "--threshold", "0.1", "--curve", "5"], "--curve counts"),
        (["--select", "threshold", "--threshold", "0.1", "--curve", "mib"], "--curve counts"),
        (["--select", "threshold", "--threshold", "1e9"], "--threshold 1e+09 keeps no edge"),
        (["--nodes", "3"], "--nodes counts a node circuit's heads and MLPs: give --level node"),
        (["--level", "node", "--nodes", "3", "--edges", "5"], "give --nodes N, not --edges"),
        (["--level", "node", "--refine", "5"], "--refine computes edges exactly"),
        (["--level", "node", "--select", "greedy"], "--select greedy takes edges"),
        (["--level", "node", "--nodes", "1000"], "--nodes 1000 is more nodes than"),
        (["--level", "node", "--nodes", "some"], "--nodes is a number of nodes or all"),
    ],
)
def test_selection_errors_are_one_line(runner, generators, arguments, message):
    result = runner.invoke(
        app, ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS, *arguments]
    )
    if arguments == ["--select", "best"]:  # typer's own check of a choice
        assert result.exit_code == 2 and message in result.stderr and result.stdout == ""
        return
    failed_in_process(result, 2, message)


def test_a_circuit_written_as_json_reads_back_and_is_measured_again_without_scoring(
    runner, generators, language_models, tmp_path, monkeypatch
):
    """-f json holds everything: Circuit.load gives the same scores, mask and measures;
    --scores measures another selection and curve over the same pair, scoring nothing,
    and finds what a whole run finds."""
    import attnviz.circuits.passes as circuit_module
    from attnviz.circuits.circuit import Circuit

    path = generators["gemma2-lm"]
    common = ["circuit", TEXT, "--model", path, *TWINS]
    written = runner.invoke(app, [*common, "--edges", "9", "--curve", "0,30", "-f", "json"])
    assert written.exit_code == 0, written.stderr
    saved = tmp_path / "circuit.json"
    saved.write_text(written.stdout, encoding="utf-8")
    expected = language_models["gemma2-lm"].circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=9, curve=[0, 30]
    )
    found = Circuit.load(saved)
    np.testing.assert_array_equal(found.in_graph, expected.in_graph)
    np.testing.assert_allclose(found.scores, expected.scores, atol=1e-6)
    assert found.curve == expected.curve and found.faithfulness == expected.faithfulness
    assert (found.select, found.asked, found.prune, found.kept) == ("top", 9, True, expected.kept)
    nodes = runner.invoke(app, [*common, "--level", "node", "--nodes", "5", "-f", "json"])
    node_file = tmp_path / "nodes.json"
    node_file.write_text(nodes.stdout, encoding="utf-8")
    by_nodes = Circuit.load(node_file)
    assert by_nodes.level == "node" and by_nodes.asked == 5
    assert len(by_nodes.node_scores) == len(by_nodes.graph.upstream)
    assert json.loads(nodes.stdout)["circuit"]["kept"] == by_nodes.kept

    def never(*_arguments):
        raise AssertionError("the pair was scored again")

    monkeypatch.setattr(circuit_module, "scored", never)
    again = ["--scores", str(saved), "--select", "greedy", "--edges", "12", "--curve", "40"]
    measured = json.loads(runner.invoke(app, [*common, *again, "-f", "json"]).stdout)
    monkeypatch.undo()
    whole = language_models["gemma2-lm"].circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=12, curve=[40], select="greedy"
    )
    assert measured["circuit"]["kept"] == whole.kept
    assert abs(measured["circuit"]["faithfulness"] - whole.faithfulness) <= 1e-5
    assert abs(measured["curve"][0]["faithfulness"] - whole.curve[0].faithfulness) <= 1e-5


def test_a_scores_file_that_is_not_this_circuits_is_refused_in_one_line(
    runner, generators, tmp_path
):
    common = ["circuit", TEXT, *TWINS]
    written = runner.invoke(app, [*common, "--model", generators["llama-lm"], "-f", "json"])
    whole = tmp_path / "circuit.json"
    whole.write_text(written.stdout, encoding="utf-8")
    cut = tmp_path / "cut.json"
    cut.write_text(written.stdout[: len(written.stdout) // 2], encoding="utf-8")
    maps = tmp_path / "maps.json"
    maps.write_text(runner.invoke(app, ["show", "a b", "-f", "json"]).stdout, encoding="utf-8")
    document = json.loads(written.stdout)
    document["edges"] = document["edges"][:-1]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(document), encoding="utf-8")
    pairs = _write_pairs(tmp_path, [PAIR, OTHER])
    for arguments, message in (
        (["--model", generators["gpt2-lm"], "--scores", str(whole)], "this model has"),
        (["--model", generators["llama-lm"], "--scores", str(cut)], "is not a circuit's JSON"),
        (["--model", generators["llama-lm"], "--scores", str(maps)], "is not a circuit"),
        (["--model", generators["llama-lm"], "--scores", str(short)], "edges"),
        (["--model", generators["llama-lm"], "--scores", str(tmp_path / "none.json")], "no such"),
    ):
        failed_in_process(runner.invoke(app, [*common, *arguments]), 2, message)
    other = ["circuit", "--pairs", pairs, "--model", generators["llama-lm"], "--scores", str(whole)]
    failed_in_process(runner.invoke(app, other), 2, "was scored on 1 pair, not 2")


def test_every_pair_is_checked_before_the_first_is_scored(
    runner, generators, tmp_path, monkeypatch
):
    import attnviz.circuits.passes as circuit_module

    def never(*_arguments):
        raise AssertionError("a pair was scored before every pair was checked")

    monkeypatch.setattr(circuit_module, "scored", never)
    pairs = _write_pairs(tmp_path, [PAIR, OTHER, {**OTHER, "corrupt": "The dog saw"}])
    result = runner.invoke(app, ["circuit", "--pairs", pairs, "--model", generators["llama-lm"]])
    failed_in_process(result, 2, "pairs.jsonl, line 3: the corrupted text is")


def test_a_circuit_that_keeps_little_says_so_with_what_to_try(runner, generators, monkeypatch):
    from attnviz.circuits import notes as circuit_notes

    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS, "-f", "json"]
    monkeypatch.setattr(circuit_notes, "LOW_FAITHFULNESS", 2.0)  # every circuit keeps little
    said = runner.invoke(app, [*common, "--edges", "20"])
    assert said.exit_code == 0, said.stderr
    (line,) = said.stderr.splitlines()
    assert line.startswith("attnviz: warning: the circuit of ") and "try more --edges" in line
    assert runner.invoke(app, [*common, "--edges", "0"]).stderr == ""  # none asked: scores only
    monkeypatch.setattr(circuit_notes, "LOW_FAITHFULNESS", -1.0)
    assert runner.invoke(app, [*common, "--edges", "20"]).stderr == ""


def _eap_ig_read(document, heads, kv_heads):
    """EAP-IG's graph file under attnviz's edge names: each edge's score (a query head's
    key and value copies summed into their key/value head's) and whether it is in the
    circuit (every copy alike)."""
    group, kv = heads // kv_heads, "h" if kv_heads == heads else "kv"
    scores, kept = {}, {}
    for name, edge in document["edges"].items():
        parent, child = name.split("->")
        if child.endswith(">"):
            head_name, letter = child[:-1].split("<")
            layer, head = head_name.split(".")
            unit = head if letter == "q" else f"{kv}{int(head[1:]) // group}"
            child = f"{layer}.{unit}.{letter}"
        scores[parent, child] = scores.get((parent, child), 0.0) + edge["score"]
        kept.setdefault((parent, child), set()).add(edge["in_graph"])
    assert all(len(alike) == 1 for alike in kept.values())
    return scores, {edge for edge, alike in kept.items() if alike == {True}}


def test_eap_ig_s_graph_file_holds_the_circuit_its_copies_summing_to_the_grouped_scores(
    runner, generators, language_models
):
    """-f eap-ig: EAP-IG's Graph.to_json layout (cfg, nodes, edges named parent->child<q>);
    a grouped key/value edge becomes one edge per query head of its group whose scores sum
    to attnviz's, all in the circuit or none; its nodes are the circuit's. Its scores are
    in MIB's sign, the loss's (MIB-circuit-track's run_attribution.py scores the logit
    difference with loss=True): attnviz's negated, an edge the answer needs positive."""
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS, "--edges", "20"]
    document = json.loads(runner.invoke(app, [*common, "-f", "eap-ig"]).stdout)
    expected = language_models["llama-lm"].circuit(TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=20)
    graph = expected.graph
    assert document["cfg"] == {
        "n_layers": graph.layers, "n_heads": graph.heads, "parallel_attn_mlp": False,
        "d_model": language_models["llama-lm"].loaded.model.config.hidden_size,
        "score_sign": "loss",
    }  # fmt: skip
    copies = [
        graph.heads // graph.kv_heads if graph.downstream[d].split(".")[-1] in "kv" else 1
        for d in graph.edge_list()[1]
    ]
    assert len(document["edges"]) == sum(copies)
    scores, kept = _eap_ig_read(document, graph.heads, graph.kv_heads)
    found = {(first, then): score for first, then, score in expected.edges()}
    assert scores.keys() == found.keys()
    assert max(abs(scores[edge] + found[edge]) for edge in found) <= 1e-6
    assert any(abs(found[edge]) > 1e-3 for edge in found)  # the sign is seen
    assert kept == {(first, then) for first, then, _ in expected.kept_edges()}
    held = {name for name, node in document["nodes"].items() if node["in_graph"]}
    assert held == {*expected.scored.nodes(), "logits"}
    failed_in_process(runner.invoke(app, [*common, "-f", "eap-ig", "--picture", "c.png"]), 2, "-f")


def test_a_bootstrapped_circuit_says_so_in_its_table_and_its_file(
    runner, language_models, generators, tmp_path
):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(pair) + "\n" for pair in [PAIR, OTHER]))
    common = ["circuit", "--pairs", str(pairs), "--model", generators["llama-lm"]]
    expected = language_models["llama-lm"].circuit(pairs=[PAIR, OTHER], bootstrap=4)
    held = int((expected.scores[expected.graph.edges] != 0).sum())
    table = runner.invoke(app, [*common, "--bootstrap", "4", "--width", "200"])
    assert table.exit_code == 0, table.stderr
    assert f"bootstrapped over 4 resamples of the pairs: {held:,} of " in table.stdout
    document = json.loads(runner.invoke(app, [*common, "--bootstrap", "4", "-f", "json"]).stdout)
    assert document["bootstrap"] == 4
    (tmp_path / "c.json").write_text(json.dumps(document), encoding="utf-8")
    assert Circuit.load(tmp_path / "c.json").bootstrap == 4
    plain = json.loads(runner.invoke(app, [*common, "-f", "json"]).stdout)
    assert plain["bootstrap"] is None


def test_mibs_curve_gives_its_areas_in_the_table_the_json_and_the_picture_and_reads_back(
    runner, language_models, generators, tmp_path
):
    """--curve mib: the table says CPR and CMD and the curve each is read from, the JSON
    gives them (null for any other curve) with each point's fraction and selection; the
    file read back by --scores measures the same curves, and one written before its points
    named their selection reads as one curve; the picture's curve panel names both areas
    and both curves."""
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS, "--curve", "mib"]
    expected = language_models["llama-lm"].circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, curve=["mib"]
    )
    table = runner.invoke(app, [*common, "--width", "200"])
    assert table.exit_code == 0, table.stderr
    cpr, cmd, *_ = expected.areas
    assert (
        f"CPR {cpr:.3f} (under the signed circuits' curve), CMD {cmd:.3f} (between the top "
        "circuits' curve and 1)"
    ) in table.stdout
    assert "  0 asked (0.1%), 0 kept" in table.stdout
    assert "  0 asked (0.1%) by signed, 0 kept" in table.stdout
    written = runner.invoke(app, [*common, "-f", "json"]).stdout
    document = json.loads(written)
    assert abs(document["cpr"] - cpr) <= 1e-6 and abs(document["cmd"] - cmd) <= 1e-6
    assert (document["cpr_select"], document["cmd_select"]) == ("signed", "top")
    curve = document["curve"]
    assert [point["fraction"] for point in curve] == pytest.approx(mib_fractions() * 2)
    assert [point["select"] for point in curve] == ["top"] * 10 + ["signed"] * 10
    (tmp_path / "mib.json").write_text(written, encoding="utf-8")
    read_back = Circuit.load(tmp_path / "mib.json").areas
    assert read_back == (document["cpr"], document["cmd"], "signed", "top")
    again = ["--scores", str(tmp_path / "mib.json"), "-f", "json"]
    read = json.loads(runner.invoke(app, [*common, *again]).stdout)
    assert abs(read["cpr"] - cpr) <= 1e-6 and abs(read["cmd"] - cmd) <= 1e-6
    older = {**document, "curve": [
        {name: value for name, value in point.items() if name != "select"}
        for point in document["curve"][:10]
    ]}  # fmt: skip
    (tmp_path / "older.json").write_text(json.dumps(older), encoding="utf-8")
    one_curve = Circuit.load(tmp_path / "older.json").areas
    assert one_curve.cmd == pytest.approx(cmd, abs=1e-12)
    assert (one_curve.cpr_select, one_curve.cmd_select) == ("top", "top")
    assert abs(one_curve.cpr - cpr) > 1e-3  # the |score| curve's CPR is another number
    svg = expected.picture("svg").data.decode()
    assert f"CPR {cpr:.3f} (signed)" in svg and f"CMD {cmd:.3f} (top)" in svg


def test_a_circuit_written_for_eap_ig_reads_back_to_the_same_masks_and_faithfulness(
    runner, generators, tmp_path
):
    """-f eap-ig, read back by --scores (its key/value copies summed into their grouped
    edge), chooses the same circuits and measures the same faithfulness as -f json does;
    EAP-IG's file holds no metrics: one EAP pass reads them."""
    common = ["circuit", TEXT, "--model", generators["llama-lm"], *TWINS, "--method", "ig"]
    asked = ["--edges", "20", "--curve", "5,40"]
    for output in ("json", "eap-ig"):
        written = runner.invoke(app, [*common, *asked, "-f", output])
        assert written.exit_code == 0, written.stderr
        (tmp_path / f"{output}.json").write_text(written.stdout, encoding="utf-8")
    original = json.loads((tmp_path / "json.json").read_text())
    for output in ("json", "eap-ig"):
        again = ["--scores", str(tmp_path / f"{output}.json"), *asked, "-f", "json"]
        read = json.loads(runner.invoke(app, [*common, *again]).stdout)
        assert read["circuit"]["edges"] == original["circuit"]["edges"], output
        assert abs(read["circuit"]["faithfulness"] - original["circuit"]["faithfulness"]) < 1e-6
        for point, expected in zip(read["curve"], original["curve"], strict=True):
            assert point["kept"] == expected["kept"]
            assert abs(point["faithfulness"] - expected["faithfulness"]) < 1e-6
        assert read["source"] == str(tmp_path / f"{output}.json")
    document = json.loads((tmp_path / "eap-ig.json").read_text())
    own = {**document, "cfg": {**document["cfg"], "score_sign": "metric"}}
    own["edges"] = {
        name: {**edge, "score": -edge["score"]} for name, edge in document["edges"].items()
    }
    (tmp_path / "own.json").write_text(json.dumps(own), encoding="utf-8")
    read = json.loads(runner.invoke(app, [*common, "--scores", str(tmp_path / "own.json"),
                                          *asked, "-f", "json"]).stdout)  # fmt: skip
    assert read["circuit"]["edges"] == original["circuit"]["edges"]  # attnviz's sign, as is
    own["cfg"]["score_sign"] = "gain"
    (tmp_path / "own.json").write_text(json.dumps(own), encoding="utf-8")
    other = runner.invoke(app, [*common, "--scores", str(tmp_path / "own.json")])
    failed_in_process(other, 2, "says score_sign 'gain': \"loss\" (MIB's")
    document["cfg"]["n_heads"] += 1
    (tmp_path / "other.json").write_text(json.dumps(document), encoding="utf-8")
    other = runner.invoke(app, [*common, "--scores", str(tmp_path / "other.json")])
    failed_in_process(other, 2, "is EAP-IG's graph of a model of 2 layers × 5 heads")


def test_advice_names_an_option_as_its_reader_gives_it():
    from attnviz.errors import flags_named, option

    asked = [("--method", "gradient"), ("--refine", "K"), ("--steps", 5), ("--no-prune", None)]
    python = ['method="gradient"', "refine=K", "steps=5", "prune=False"]
    assert [option(*each) for each in asked] == python
    with flags_named():
        spelled = [option(*each) for each in asked]
    assert spelled == ["--method gradient", "--refine K", "--steps 5", "--no-prune"]
    assert option("--curve") == "curve"  # and back to Python's once the command is done
