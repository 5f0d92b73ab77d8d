"""The real `attnviz` process: start-up imports, pipes, stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.schema import SCHEMA_VERSION

PARAGRAPH = Path(__file__).parent.parent / "sample_texts" / "paragraph.txt"

HEAVY = ("torch", "transformers", "matplotlib", "numpy")


@pytest.mark.parametrize("arguments", [["--help"], ["--version"], ["show", "--help"]])
def test_help_and_version_import_no_heavy_module(arguments):
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from attnviz.cli import app\n"
        f"result = CliRunner().invoke(app, {arguments!r})\n"
        "assert result.exit_code == 0, result.output\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_usage_errors_import_no_heavy_module():
    """Each usage error is found before torch, transformers or matplotlib load."""
    cases = [
        ["show", ""],
        ["show", "  "],
        ["show", "a b", "--layer", "9"],
        ["show", "a b", "--head", "x"],
        ["show", "a b", "--mode", "sideways"],
        ["show", "a b", "--mode", "cross"],
        ["show", "a b", "--target", "c"],
        ["show", "a b", "--words"],
        ["show", "a b", "--d-model", "10"],
        ["show", "a b", "--model", "minilm", "--layer", "x"],
        ["show", "", "--model", "minilm"],
        ["heads", "a b", "--num-layers", "2", "--model", "minilm"],
        ["explain", "a b", "--layer", "0-1"],
        ["explain", "a b", "--query", "1"],
        ["show", "a b", "-f", "terminal", "-o", "x.json"],
        ["show", "a b", "--d-model", "4096", "--num-layers", "64"],  # ~112 GiB of weights
    ]
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from attnviz.cli import app\n"
        f"for arguments in {cases!r}:\n"
        "    result = CliRunner().invoke(app, arguments)\n"
        "    assert result.exit_code == 2, (arguments, result.output)\n"
        f"print(','.join(m for m in {HEAVY[:3]!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def run_shell(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120
    )


def test_picture_piped_to_head_exits_cleanly():
    # ~1 MB of picture: far more than a pipe holds, so the writer meets a closed pipe.
    result = run_shell(
        f"{sys.executable} -m attnviz show - -f terminal --num-layers 6 --num-heads 8 --width 300"
        f" < {PARAGRAPH} | head -n 1"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("builtin:")


def test_a_pipe_gets_ndjson_and_head_ends_the_stream_cleanly():
    lines = "\n".join(["The man walked the dog"] * 50)
    result = run_shell(
        f"printf '{lines}\n' | {sys.executable} -m attnviz show - --num-layers 6 --num-heads 8"
        " | head -n 2"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 2 and records[0]["schema_version"] == SCHEMA_VERSION


def test_json_from_stdin_through_a_pipe():
    result = run_shell(
        f"printf 'The man walked the dog\\n' | {sys.executable} -m attnviz show - --format json"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["key_tokens"] == ["the", "man", "walked", "the", "dog"]


def test_error_exit_code_reaches_the_shell():
    result = run_shell(f"{sys.executable} -m attnviz show '' ")
    assert result.returncode == 2
    assert result.stderr == "attnviz: error: the text is empty: give some words to look at\n"


def test_stdin_lines_are_answered_as_they_arrive():
    """The first record comes out before the second line has even been written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "attnviz", "show", "-", "-f", "ndjson"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        process.stdin.write("The man walked the dog\n")
        process.stdin.flush()
        first = json.loads(process.stdout.readline())  # blocks until the record is written
        assert first["text"] == "The man walked the dog"
        process.stdin.write("Hello I love you\n")
        process.stdin.close()
        second = json.loads(process.stdout.readline())
        assert second["text"] == "Hello I love you"
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
