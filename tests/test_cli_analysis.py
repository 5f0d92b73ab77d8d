"""--top-heads, show --aggregate, the heads table and a run repeated from its recorded
model, through the CLI (the diff and top commands: tests/test_diff.py, tests/test_top.py)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

import attnviz
from attnviz.analysis.heads import TopHeads, head_statistics, sort_rows
from attnviz.cli import app
from attnviz.head_columns import HeadColumn, Needs, RankBy


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


def test_show_aggregate_rollout_draws_one_map(runner):
    result = runner.invoke(
        app, ["show", "Hello I love you", "--aggregate", "rollout", "-f", "terminal"]
    )
    assert result.exit_code == 0
    assert result.stdout.count("╭") == 1
    assert "rollout · layers 0,1 · heads 0–3" in result.stdout


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


@pytest.mark.parametrize("by", [by for by in RankBy if HeadColumn(by).needs is not Needs.ANSWER])
@pytest.mark.parametrize("lowest", [False, True])
def test_top_heads_agree_with_heads_sort(runner, by, lowest):
    """(The effects on an answer: tests/test_effects.py, on a language model.)"""
    arguments = ["Hello I love you", "--num-layers", "3", "--num-heads", "4"]
    arguments += ["--span", "love"] if by is RankBy.SPAN else []
    listed = runner.invoke(
        app,
        ["heads", *arguments, "--sort", by.value, "-f", "json", *(["--reverse"] if lowest else [])],
    )
    expected = [(row["layer"], row["head"]) for row in json.loads(listed.stdout)["heads"][:3]]
    drawn = runner.invoke(
        app,
        ["show", *arguments, "--top-heads", "3", "--by", by.value, "--color", "never"]
        + (["--lowest"] if lowest else []),
    )
    assert drawn.exit_code == 0, drawn.stderr
    titles = [line for line in drawn.stdout.splitlines() if "╭" in line]
    shown = [(int(layer), int(head)) for line in titles for layer, head in _layer_heads(line)]
    assert shown == expected


def test_top_heads_panels_are_the_ranked_maps_themselves():
    maps = attnviz.extract("the cat sat on the mat", mode="masked")
    ranked = sort_rows(head_statistics(maps), HeadColumn.SINK)
    panels = TopHeads(2, RankBy.SINK).panels(maps)
    assert [(p.layer, p.head) for p in panels] == [(r.layer, r.head) for r in ranked[:2]]
    for panel in panels:
        np.testing.assert_array_equal(panel.matrix, maps.head(panel.layer, panel.head))
        assert f"sink {ranked[0].sink:.3f}" in panels[0].title


def test_top_heads_in_export_and_batch_draw_only_those(runner, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("Hello I love you\nthe cat sat\n")
    result = runner.invoke(
        app,
        ["batch", str(text), "-o", str(tmp_path / "b"), "--top-heads", "2", "--by", "self", "-q"],
    )
    assert result.exit_code == 0, result.stderr
    for stem in ("0000-hello-i-love-you", "0001-the-cat-sat"):
        files = sorted(path.name for path in (tmp_path / "b").glob(f"{stem}-L*.png"))
        maps = attnviz.extract(stem.split("-", 1)[1].replace("-", " "))
        expected = [
            f"{stem}-L{p.layer}-H{p.head}.png" for p in TopHeads(2, RankBy.SELF).panels(maps)
        ]
        assert files == sorted(expected)
    picture = runner.invoke(
        app, ["export", "Hello I love you", "-o", str(tmp_path / "x.png"), "--top-heads", "1",
              "--view", "head"],
    )  # fmt: skip
    assert picture.exit_code == 0, picture.stderr


def _layer_heads(line: str):
    import re

    return re.findall(r"layer (\d+) · head (\d+)", line)


LONG_TEXT = " ".join(f"w{i}" for i in range(1500))  # distances of a thousand tokens and more


@pytest.mark.parametrize(
    "arguments",
    [
        ["The cat sat on the mat"],
        ["--detect", "induction"],
        ["--rows", "last", "--span", "0-9", LONG_TEXT],
    ],
)
def test_the_heads_table_fits_80_columns_without_cutting_a_name_or_number(runner, arguments):
    from rich.cells import cell_len

    result = runner.invoke(app, ["heads", *arguments], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert max(cell_len(line) for line in result.stdout.splitlines()) <= 80
    # The only "…" is the caption's own ("[CLS], <s>, …"): no header or cell is cut.
    assert result.stdout.count("…") == result.stdout.count("<s>, …") and "top_key" in result.stdout
