"""heads, top, diff and show --aggregate through the CLI."""

from __future__ import annotations

import csv
import io
import json

import pytest

from attnviz.cli import app


@pytest.mark.slow
@pytest.mark.minilm
def test_heads_of_minilm_has_72_rows_sorted(runner):
    result = runner.invoke(
        app, ["heads", "--model", "minilm", "The man walked the dog", "--sort", "entropy",
              "-f", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["heads"]
    assert len(rows) == 72
    entropies = [row["entropy"] for row in rows]
    assert entropies == sorted(entropies, reverse=True)
    assert {(row["layer"], row["head"]) for row in rows} == {
        (layer, head) for layer in range(6) for head in range(12)
    }


def test_heads_table_and_csv(runner):
    table = runner.invoke(app, ["heads", "The man walked the dog", "--top", "3"])
    assert table.exit_code == 0
    assert "entropy" in table.stdout and "top_key" in table.stdout
    data = runner.invoke(app, ["heads", "The man walked the dog", "-f", "csv", "--sort", "self"])
    rows = list(csv.DictReader(io.StringIO(data.stdout)))
    assert len(rows) == 8
    assert [float(row["self"]) for row in rows] == sorted(
        (float(row["self"]) for row in rows), reverse=True
    )


def test_top_prints_a_line_per_query_token(runner):
    result = runner.invoke(app, ["top", "attention is cool", "-l", "0", "--head", "1", "-k", "2"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# layer 0 · head 1"
    assert [line.split(" → ")[0] for line in lines[1:]] == ["attention", "is", "cool"]
    assert all(line.count(",") == 1 for line in lines[1:])


def test_top_of_an_aggregate(runner):
    result = runner.invoke(app, ["top", "attention is cool", "-a", "rollout", "-f", "json"])
    assert result.exit_code == 0 and result.stderr == ""
    block = json.loads(result.stdout)["maps"][0]
    assert block["title"].startswith("rollout") and block["layer"] is None


def test_show_aggregate_rollout_draws_one_map(runner):
    result = runner.invoke(
        app, ["show", "Hello I love you", "--aggregate", "rollout", "-f", "terminal"]
    )
    assert result.exit_code == 0
    assert result.stdout.count("╭") == 1
    assert "rollout · layers 0,1 · heads 0–3" in result.stdout


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


def test_a_run_is_repeated_from_the_model_name_it_recorded(runner):
    """The model name in every output of the built-in stack is a --model that rebuilds it,
    and the stack options refine it; so diff compares two stacks by --against."""
    options = ["--num-layers", "3", "--num-heads", "2", "--seed", "5", "--no-positions"]
    first = runner.invoke(app, ["show", "The man walked", "-f", "json", *options])
    recorded = json.loads(first.stdout)
    again = runner.invoke(
        app, ["show", "The man walked", "-f", "json", "--model", recorded["model"]]
    )
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout) == recorded
    refined = runner.invoke(
        app, ["show", "x", "-f", "json", "--model", "builtin:seed=5", "--seed", "6"]
    )
    assert json.loads(refined.stdout)["model"] == "builtin:layers=2,heads=4,d_model=64,seed=6"
    compared = runner.invoke(app, ["diff", "The man walked", "--against", "builtin:seed=3"])
    assert compared.exit_code == 0, compared.stderr
    assert compared.stdout.splitlines()[0].endswith(
        " vs builtin:layers=2,heads=4,d_model=64,seed=3 · self attention"
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["show", "x", "--model", "builtin:layers=two"], "layers takes a whole number, not 'two'"),
        (
            ["explain", "x", "--model", "builtin:seed=1", "--query", "0"],
            "--query goes with --model",
        ),
        (
            ["show", "x", "--model", "builtin:seed=1", "--device", "cpu"],
            "the built-in stack runs on",
        ),
    ],
)
def test_a_builtin_model_name_is_checked_as_the_stack_options_are(runner, arguments, message):
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1


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
