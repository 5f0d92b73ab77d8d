"""`attnviz circuit` on the command line: its table, data and picture (the same numbers as
`Extractor.circuit`), a dataset of pairs from a JSONL file, and its usage errors: one
line, exit 2, nothing written."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from attnviz.cli import app
from tests.checks import failed_in_process, model_tolerance
from tests.circuit_references import OTHER, PAIR
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS

TWINS = ["--answer", ANSWER, "--versus", VERSUS, "--corrupt", CORRUPT]


def test_the_table_json_and_csv_say_the_circuit(runner, generators, language_models):
    path = generators["llama-lm"]
    common = ["circuit", TEXT, "--model", path, *TWINS, "--edges", "9", "--curve", "0,30"]
    drawn = runner.invoke(app, [*common, "--rows", "5", "--width", "120"])
    assert drawn.exit_code == 0, drawn.stderr
    assert drawn.stderr == ""
    expected = language_models["llama-lm"].circuit(
        TEXT, ANSWER, CORRUPT, versus=VERSUS, edges=9, curve=[0, 30]
    )
    (first, then, _), *_ = expected.edges(1)
    assert first in drawn.stdout and then in drawn.stdout
    assert f"circuit of 9 of {expected.graph.count} edges: faithfulness" in drawn.stdout
    assert "30 edges: faithfulness" in drawn.stdout
    document = json.loads(runner.invoke(app, [*common, "-f", "json"]).stdout)
    assert {"clean_metric", "corrupt_metric", "nodes", "edges", "circuit", "curve"} <= set(document)
    assert len(document["edges"]) == expected.graph.count
    scores = {(edge["from"], edge["to"]): edge["score"] for edge in document["edges"]}
    tolerance = model_tolerance(language_models["llama-lm"].loaded.model.config)
    for edge_from, edge_to, score in expected.edges():
        assert abs(scores[edge_from, edge_to] - score) <= tolerance
    assert len(document["circuit"]["edges"]) == 9
    assert abs(document["circuit"]["faithfulness"] - expected.faithfulness) <= 1e-4
    assert [point["edges"] for point in document["curve"]] == [0, 30]
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, [*common, "-f", "csv"]).stdout)))
    assert len(rows) == expected.graph.count
    assert sum(row["in_circuit"] == "True" for row in rows) == 9
    assert [int(row["rank"]) for row in rows] == list(range(1, len(rows) + 1))


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_the_picture_is_written(runner, generators, tmp_path, suffix):
    picture = tmp_path / f"circuit.{suffix}"
    common = ["circuit", TEXT, "--model", generators["gemma2-lm"], *TWINS, "--curve", "0,10"]
    result = runner.invoke(app, [*common, "--edges", "8", "--picture", str(picture)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
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
        (["--corrupt", "The dog", "--answer", ANSWER], "the corrupted text is"),
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
