"""The terminal-only branches, reached in-process by handing a command its environment."""

from __future__ import annotations

import json
import os

import pytest

import attnviz
from attnviz.cli import app
from attnviz.cli.environment import Environment

TERMINAL = Environment(stdout_is_terminal=True, stderr_is_terminal=True)
PIPES = Environment(stdout_is_terminal=False, stderr_is_terminal=False)


def test_show_draws_for_a_terminal_and_writes_ndjson_to_a_pipe(runner):
    drawn = runner.invoke(app, ["show", "a b", "-l", "0", "--width", "80"], obj=TERMINAL)
    assert drawn.exit_code == 0, drawn.stderr
    assert "layer 0 · head 0" in drawn.stdout and "\x1b[" in drawn.stdout  # coloured cells
    piped = runner.invoke(app, ["show", "a b", "-l", "0"], obj=PIPES)
    assert piped.exit_code == 0, piped.stderr
    assert json.loads(piped.stdout)["key_tokens"] == ["a", "b"]


def test_a_file_gets_data_whatever_stdout_is(runner, tmp_path):
    """-o with a suffix that names no format: on a terminal the picture went to stdout and
    the file was never written."""
    for environment in (TERMINAL, PIPES):
        saved = tmp_path / "maps.txt"
        result = runner.invoke(app, ["show", "a b", "-o", str(saved)], obj=environment)
        assert result.exit_code == 0 and result.stdout == "", result.stderr
        assert json.loads(saved.read_text())["key_tokens"] == ["a", "b"]
        saved.unlink()
    pictured = runner.invoke(
        app, ["show", "a b", "--label-positions", "-o", str(tmp_path / "x")], obj=PIPES
    )
    assert pictured.exit_code == 2 and pictured.stdout == ""
    assert "--output goes with a data --format" in pictured.stderr
    assert list(tmp_path.iterdir()) == []


def test_values_ask_for_the_picture_even_into_a_pipe(runner):
    """As --view does: the weights in the cells were silently dropped for ndjson."""
    result = runner.invoke(app, ["show", "a b", "--values", "-l", "0", "--head", "0"], obj=PIPES)
    assert result.exit_code == 0, result.stderr
    weights = attnviz.extract("a b", layers=0, heads=0).weights[0, 0]
    assert "layer 0 · head 0" in result.stdout
    assert f"{weights[0, 0]:.2f}".lstrip("0") in result.stdout


def test_explore_needs_a_terminal(runner):
    result = runner.invoke(app, ["explore", "a b"], obj=PIPES)
    assert result.exit_code == 2
    assert (
        "explore is a full-screen app: run it with stdout and stderr on a terminal" in result.stderr
    )


@pytest.mark.parametrize(("environment", "bar"), [(TERMINAL, True), (PIPES, False)])
def test_batch_progress_is_a_bar_on_a_terminal_and_lines_otherwise(
    runner, tmp_path, environment, bar
):
    source = tmp_path / "in.txt"
    source.write_text("a b\nc d\n")
    result = runner.invoke(
        app, ["batch", str(source), "-o", str(tmp_path / "out"), "-f", "json"], obj=environment
    )
    assert result.exit_code == 0, result.stderr
    assert ("\x1b[" in result.stderr) == bar  # the bar is drawn with escape codes
    assert ("attnviz: 2/2 inputs" in result.stderr) != bar
    assert "2 inputs: 2 written" in result.stderr  # the summary, either way


def test_loading_a_model_shows_a_spinner_on_a_terminal_only(runner, tiny):
    arguments = ["show", "hi", "--model", tiny["bert"], "-f", "json"]
    spun = runner.invoke(app, arguments, obj=TERMINAL)
    assert spun.exit_code == 0, spun.stderr
    assert "loading" in spun.stderr
    quiet = runner.invoke(app, arguments, obj=PIPES)
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert json.loads(spun.stdout)["weights"] == json.loads(quiet.stdout)["weights"]


@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        ({}, "PASSIVE"),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),  # a user's own choice is kept
        ({"GOMP_SPINCOUNT": "300000"}, None),
    ],
)
def test_a_command_has_torchs_threads_wait_asleep_unless_the_user_chose(
    runner, monkeypatch, given, wanted
):
    """Spinning OpenMP threads beside another process's work made a circuit 16 times
    slower (benchmarks/threads.py): a command asks them to wait asleep, before torch is
    first imported (its workers inherit it), unless the user set how they wait."""
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    assert runner.invoke(app, ["--version"]).exit_code == 0
    assert os.environ.get("OMP_WAIT_POLICY") == wanted
