"""`attnviz show` through typer's CliRunner: stdout and stderr apart, exit codes, safety;
its aggregates, the heads it ranks first (--top-heads) and a run repeated from its
recorded model."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import attnviz
from attnviz.analysis.heads import TopHeads, head_statistics, sort_rows
from attnviz.cli import app
from attnviz.head_columns import HeadColumn, Needs, RankBy

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_show_draws_every_head_labelled(runner):
    result = runner.invoke(app, ["show", "Hello I love you", "-f", "terminal", "--width", "120"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    for layer in range(2):
        for head in range(4):
            assert f"layer {layer} · head {head}" in result.stdout
    assert all(len(line) <= 120 for line in result.stdout.splitlines())
    assert "\x1b" not in result.stdout  # no escape code into a pipe


def test_json_goes_to_stdout_alone_and_matches_the_library(runner):
    result = runner.invoke(
        app, ["show", "Hello I love you", "--format", "json", "--mode", "masked", "--layer", "1"]
    )
    assert result.exit_code == 0
    assert result.stderr == ""
    document = json.loads(result.stdout)
    expected = attnviz.extract("Hello I love you", mode="masked", layers=1)
    assert document["query_tokens"] == ["hello", "i", "love", "you"]
    assert document["layers"] == [1] and document["heads"] == [0, 1, 2, 3]
    np.testing.assert_array_equal(np.asarray(document["weights"], np.float32), expected.weights)


def test_json_to_a_file_writes_nothing_on_stdout(runner, tmp_path):
    path = tmp_path / "maps.json"
    result = runner.invoke(app, ["show", "a b c", "--format", "json", "-o", str(path)])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert json.loads(path.read_text())["key_tokens"] == ["a", "b", "c"]
    assert [p.name for p in tmp_path.iterdir()] == ["maps.json"]  # no temporary left behind


def test_stdin_text(runner):
    result = runner.invoke(app, ["show", "-", "--format", "json"], input="Ich liebe dich\n")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["text"] == "Ich liebe dich"


def test_cross_mode_rows_are_target_tokens(runner):
    result = runner.invoke(
        app,
        ["show", "Hello I love you", "-m", "cross", "-t", "je t'aime", "--format", "json"],
    )
    assert result.exit_code == 0 and result.stderr == ""
    document = json.loads(result.stdout)
    assert document["query_tokens"] == ["je", "t", "'", "aime"]
    assert document["key_tokens"] == ["hello", "i", "love", "you"]
    assert document["target"] == "je t'aime"


def test_stack_options_change_the_stack(runner):
    result = runner.invoke(
        app,
        [
            "show", "one two three", "--num-layers", "3", "--num-heads", "2", "--d-model", "8",
            "--seed", "5", "--no-positions", "--format", "json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0 and result.stderr == ""
    document = json.loads(result.stdout)
    assert document["model"] == "builtin:layers=3,heads=2,d_model=8,seed=5,no-positions"
    assert np.asarray(document["weights"]).shape == (3, 2, 3, 3)


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["show", ""], 2, "the text is empty"),
        (["show", "  \t "], 2, "the text is empty"),
        (["show", "hi", "--layer", "2"], 2, "layer 2 is out of range: there are 2 layers"),
        (["show", "hi", "--head", "-5"], 2, "head -5 is out of range: there are 4 heads"),
        (["show", "hi", "--head", "1-x"], 2, "is not an index, a list"),
        (["show", "hi", "--mode", "cross"], 2, "cross mode needs a target text"),
        (
            ["show", "hi", "--target", "yo"],
            2,
            "only applies to cross mode, not self mode: add --mode cross",
        ),
        (["show", "hi", "-m", "cross", "-t", " "], 2, "the target is empty"),
        (["show", "hi", "--d-model", "10"], 2, "must be a multiple of num_heads"),
        (["show", "hi", "--mode", "sideways"], 2, "Invalid value for '--mode'"),
        (["show", "hi", "--no-such-flag"], 2, "No such option: --no-such-flag"),
        (["show", "hi", "-f", "terminal", "-o", "x.txt"], 2, "--output goes with a data --format"),
        (["show", "hi", "-f", "terminal", "-o", "x.json"], 2, "--format terminal and the suffix"),
    ],
)
def test_bad_input_is_one_line_on_stderr(runner, arguments, code, message):
    result = runner.invoke(app, arguments)
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr.startswith("attnviz: error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_stdin_that_is_not_utf8(runner):
    result = runner.invoke(app, ["show", "-", "-f", "ndjson"], input=b"good\ncaf\xe9\n")
    assert result.exit_code == 2
    assert result.stderr == (
        "attnviz: error: standard input line 2 is not UTF-8 text: byte 0xe9 at offset 3\n"
    )
    assert json.loads(result.stdout)["text"] == "good"  # the whole record before the error


def test_unwritable_output_is_a_runtime_error(runner, tmp_path):
    result = runner.invoke(
        app, ["show", "hi", "--format", "json", "-o", str(tmp_path / "missing" / "x.json")]
    )
    assert result.exit_code == 1
    assert "does not exist" in result.stderr
    result = runner.invoke(app, ["show", "hi", "--format", "json", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "it is a directory" in result.stderr


@pytest.mark.parametrize(
    "text",
    [
        "[bold red]not bold[/bold red] [link=http://x]x[/link]",
        "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J",
        "a\rb\bc\x00d \u202eevil",
    ],
)
@pytest.mark.parametrize("colour", ["never", "always"])
def test_text_is_data_never_markup_or_escapes(runner, text, colour):
    one_head = ["-l", "0", "--head", "0", "-f", "terminal"]
    result = runner.invoke(app, ["show", text, *one_head, "--color", colour, "--width", "200"])
    assert result.exit_code == 0
    visible = ANSI.sub("", result.stdout)  # the only escapes allowed are our own colours
    assert "\x1b" not in visible
    assert not set(visible) & {"\r", "\b", "\x00", "\x07", "\u202e"}
    if "[bold" in text:
        assert "[" in visible and "bold" in visible and "link" in visible
        assert result.stdout.count("\x1b[1m") <= 1  # only the header line is bold
        assert "\x1b]8;" not in result.stdout  # no hyperlink was made
    if "\x1b[31m" in text:
        assert "␛" in visible
    if colour == "never":
        assert result.stdout == visible


def test_a_seed_out_of_range_is_a_usage_error(runner):
    result = runner.invoke(app, ["show", "a", "--seed", str(2**64), "-f", "json"])
    assert result.exit_code == 2 and "Invalid value for '--seed'" in result.stderr


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
