"""attnviz diff: per-head divergence between two models or two saved files, a CI
threshold, and what it refuses."""

from __future__ import annotations

import json

from attnviz.cli import app


def test_diff_of_two_models_with_a_ci_threshold(runner):
    same = runner.invoke(
        app, ["diff", "The man walked", "--against", "builtin", "--fail-above", "0"]
    )
    assert same.exit_code == 0, same.stderr
    different = runner.invoke(
        app, ["diff", "The man walked", "--seed", "3", "--against", "builtin", "-f", "json",
              "--fail-above", "0.001"],
    )  # fmt: skip
    assert different.exit_code == 4  # a finding, told apart from a crash (1)
    assert "8 of 8 maps diverge by more than --fail-above 0.001" in different.stderr
    rows = json.loads(different.stdout)["heads"]
    assert len(rows) == 8 and rows[0]["divergence"] >= rows[-1]["divergence"] > 0


def test_diff_names_both_models_on_one_line_above_its_table(runner):
    result = runner.invoke(app, ["diff", "The man walked", "--seed", "3", "--against", "builtin"])
    assert result.exit_code == 0, result.stderr
    first_line = result.stdout.splitlines()[0]
    assert first_line == (
        "builtin:layers=2,heads=4,d_model=64,seed=3 vs builtin:layers=2,heads=4,d_model=64,seed=0"
        " · self attention"
    )


def test_diff_of_saved_files(runner, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    runner.invoke(app, ["show", "The man walked", "-f", "json", "-o", str(first)])
    runner.invoke(app, ["show", "The man ran", "-f", "json", "-o", str(second)])
    result = runner.invoke(app, ["diff", str(first), str(second)])
    assert result.exit_code == 2
    assert "different query tokens" in result.stderr


def test_diff_needs_a_second_side(runner):
    result = runner.invoke(app, ["diff", "The man walked"])
    assert result.exit_code == 2
    assert "needs --against" in result.stderr


def test_diff_refuses_files_of_several_inputs(runner, tmp_path):
    stream = runner.invoke(app, ["show", "-", "-f", "ndjson"], input="a b\nc d\n")
    assert stream.exit_code == 0
    path = tmp_path / "two.ndjson"
    path.write_text(stream.stdout)
    result = runner.invoke(app, ["diff", str(path), str(path)])
    assert result.exit_code == 2
    assert "holds several inputs; diff compares one with one" in result.stderr
