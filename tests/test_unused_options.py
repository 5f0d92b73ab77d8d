"""An option given where it does nothing is a usage error (exit 2, one line, nothing on
stdout), worded by one function; before, each of these ran and dropped the option."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.cli import app


@pytest.fixture
def saved(runner, tmp_path):
    """The maps of one sentence, as show writes them."""
    path = tmp_path / "maps.json"
    result = runner.invoke(app, ["show", "the cat sat on the mat", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return str(path)


def refused(result, message: str) -> None:
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("command", "options", "message"),
    [
        ("heads", ["--num-layers", "7"], "--num-layers applies to a model run on TEXT, not saved"),
        ("top", ["--seed", "5"], "--seed applies to a model run on TEXT, not saved maps (--from)"),
        ("heads", ["--no-special", "--words"], "--no-special, --words apply to a model run"),
        ("top", ["--model", "minilm"], "--model applies to a model run on TEXT"),
        ("heads", ["--mode", "masked"], "--mode applies to a model run on TEXT"),
    ],
)
def test_saved_maps_refuse_the_options_of_a_model_run(runner, saved, command, options, message):
    refused(runner.invoke(app, [command, "--from", saved, *options]), message)


def test_diff_of_two_files_refuses_model_options_and_honours_the_selection(runner, saved, tmp_path):
    other = tmp_path / "other.json"
    made = runner.invoke(app, ["show", "the cat sat on the mat", "--seed", "1", "-o", str(other)])
    assert made.exit_code == 0, made.stderr
    refused(
        runner.invoke(app, ["diff", saved, str(other), "--mode", "masked"]),
        "--mode applies to a model run on TEXT, not two saved files",
    )
    refused(
        runner.invoke(app, ["diff", saved, str(other), "--num-heads", "2"]),
        "--num-heads applies to a model run on TEXT",
    )
    everything = json.loads(runner.invoke(app, ["diff", saved, str(other), "-f", "json"]).stdout)
    chosen = runner.invoke(
        app, ["diff", saved, str(other), "-f", "json", "--layer", "1", "--head", "0,3"]
    )
    assert chosen.exit_code == 0, chosen.stderr
    rows = json.loads(chosen.stdout)["heads"]
    assert sorted((row["layer"], row["head"]) for row in rows) == [(1, 0), (1, 3)]
    full = {(row["layer"], row["head"]): row["divergence"] for row in everything["heads"]}
    for row in rows:
        np.testing.assert_allclose(row["divergence"], full[row["layer"], row["head"]])


@pytest.mark.parametrize(
    "options", [["--color", "always"], ["--color", "never"], ["--width", "60"]]
)
def test_terminal_options_with_data_output_are_refused(runner, options):
    # CliRunner's stdout is no terminal: show writes ndjson, where colour and width mean nothing
    flag = " ".join(options) if options[0] == "--color" else options[0]
    refused(
        runner.invoke(app, ["show", "a b c", *options]),
        f"{flag} applies to the terminal picture, not ndjson output",
    )
    drawn = runner.invoke(app, ["show", "a b c", "-f", "terminal", *options])
    assert drawn.exit_code == 0, drawn.stderr
