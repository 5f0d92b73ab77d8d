"""`attnviz heads`: the statistics table of every head through the CLI, its formats, sort
and width. (What heads do to an answer, `--answer`: tests/test_effects.py and
tests/test_patching.py; the detectors, `--detect`: tests/test_detectors.py.)"""

from __future__ import annotations

import csv
import io
import json

import pytest

from attnviz.cli import app
from attnviz.head_columns import HeadColumn


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


def test_the_heads_table_caption_is_the_columns_help(runner):
    result = runner.invoke(app, ["heads", "a b c"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    flat = " ".join(result.stdout.split())
    for column in (HeadColumn.ENTROPY, HeadColumn.TOP_KEY):
        assert " ".join(column.help.split()) in flat


def test_a_terminals_table_shows_the_first_20_heads_and_says_how_many_more(
    runner, tiny, monkeypatch
):
    """heads printed all 270 of SmolLM2's rows in a terminal; data gets every row."""
    import attnviz.cli.heads as heads_module
    from attnviz.cli.environment import Environment

    terminal = Environment(stdout_is_terminal=True, stderr_is_terminal=True)
    common = ["heads", "The man walked the dog in the park", "--model", tiny["bert"]]
    total, limit = 3 * 4, 5  # the tiny BERT's layers × heads; fewer than them shown
    monkeypatch.setattr(heads_module, "TERMINAL_ROWS", limit)
    wide = {"COLUMNS": "200"}
    shown = runner.invoke(app, common, obj=terminal, env=wide)
    every = runner.invoke(app, [*common, "--top", "all"], obj=terminal, env=wide)

    def body(result):
        return [line for line in result.stdout.splitlines() if line.strip()[:1].isdigit()]

    assert shown.exit_code == 0, shown.stderr
    assert len(body(shown)) == limit
    assert f"… {total - limit} more heads: --top all lists every one" in shown.stdout
    assert len(body(every)) == total and "more heads" not in every.stdout
    assert len(body(runner.invoke(app, common, env=wide))) == total  # a pipe: every row
    data = json.loads(runner.invoke(app, [*common, "-f", "json"], obj=terminal).stdout)
    assert len(data["heads"]) == total
    bad = runner.invoke(app, [*common, "--top", "0"])
    assert bad.exit_code == 2 and "--top takes a number of rows" in bad.stderr
