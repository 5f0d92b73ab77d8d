"""The real `attnviz` process: start-up imports, pipes, stdin, signals, closed and full
streams, locales."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnviz.cli import app
from attnviz.schema import SCHEMA_VERSION
from tests.processes import ATTNVIZ, IN_A_SHELL, shell

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


@pytest.mark.slow
def test_picture_piped_to_head_exits_cleanly():
    # ~1 MB of picture: far more than a pipe holds, so the writer meets a closed pipe.
    result = shell(
        f"{IN_A_SHELL} show - -f terminal --num-layers 6 --num-heads 8 --width 300"
        f" < {PARAGRAPH} | head -n 1"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("builtin:")


@pytest.mark.slow
def test_a_pipe_gets_ndjson_and_head_ends_the_stream_cleanly():
    lines = "\n".join(["The man walked the dog"] * 50)
    result = shell(
        f"printf '{lines}\n' | {IN_A_SHELL} show - --num-layers 6 --num-heads 8 | head -n 2"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 2 and records[0]["schema_version"] == SCHEMA_VERSION


@pytest.mark.slow
def test_json_from_stdin_through_a_pipe():
    result = shell(f"printf 'The man walked the dog\\n' | {IN_A_SHELL} show - --format json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["key_tokens"] == ["the", "man", "walked", "the", "dog"]


def test_error_exit_code_reaches_the_shell():
    result = shell(f"{IN_A_SHELL} show '' ")
    assert result.returncode == 2
    assert result.stderr == "attnviz: error: the text is empty: give some words to look at\n"


@pytest.mark.slow
def test_stdin_lines_are_answered_as_they_arrive():
    """The first record comes out before the second line has even been written."""
    process = subprocess.Popen(
        [*ATTNVIZ, "show", "-", "-f", "ndjson"],
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


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _workers(pid: int) -> list[int]:
    """The render workers of a batch: spawned interpreters, not the resource tracker."""
    found = []
    for child in _children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            found.append(child)
    return found


def _start_batch(tmp_path, count: int) -> tuple[subprocess.Popen, Path]:
    source = tmp_path / "in.txt"
    source.write_text("\n".join(f"the man walked the dog number {i}" for i in range(count)))
    out = tmp_path / "out"
    command = [*ATTNVIZ, "batch", str(source), "-o", str(out), "-j", "2"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        manifest = out / "manifest.jsonl"
        if manifest.exists() and '"index"' in manifest.read_text():  # a record
            break
        time.sleep(0.02)
    return process, out


def with_render_workers(test):
    """A real batch whose render workers are found in /proc: Linux, ten seconds or more."""
    linux = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
    return linux(pytest.mark.slow(pytest.mark.system(test)))


@with_render_workers
def test_a_killed_worker_fails_its_inputs_and_the_batch_goes_on(tmp_path):
    process, out = _start_batch(tmp_path, 60)
    workers = _workers(process.pid)
    assert workers, "the batch should have render workers by now"
    os.kill(workers[0], signal.SIGKILL)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 3, stderr
    assert "unexpected" not in stderr and "Traceback" not in stderr
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert len(records) == 60
    died = [record for record in records if record["status"] == "failed"]
    assert died and all("worker process rendering it died" in r["error"] for r in died)


@with_render_workers
def test_workers_die_with_their_batch_and_sigterm_cleans_up(tmp_path):
    process, out = _start_batch(tmp_path, 400)
    workers = _workers(process.pid)
    assert workers
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert not [name for name in os.listdir(out) if name.startswith(".")]  # no partial files
    (tmp_path / "again").mkdir()
    killed, _ = _start_batch(tmp_path / "again", 400)
    workers = _workers(killed.pid)
    assert workers
    killed.kill()
    killed.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
        time.sleep(0.05)
    alive = [w for w in workers if Path(f"/proc/{w}/status").exists()
             and "zombie" not in Path(f"/proc/{w}/status").read_text()]  # fmt: skip
    assert alive == []


@pytest.mark.slow
def test_sigterm_while_streaming_to_a_file_leaves_no_temporary(tmp_path):
    target = tmp_path / "maps.ndjson"
    process = subprocess.Popen(
        [*ATTNVIZ, "show", "-", "-f", "ndjson", "-o", str(target)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdin.write(b"the first line\n")
    process.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob(".maps.ndjson.*")):
        time.sleep(0.02)
    time.sleep(0.5)  # the first record is being written
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    assert process.returncode == 143, process.stderr.read().decode()
    assert list(tmp_path.iterdir()) == []  # neither a partial file nor a temporary


@pytest.mark.slow
def test_dev_stdout_reaches_stdout_in_a_real_process(tmp_path):
    import subprocess

    result = subprocess.run(
        [*ATTNVIZ, "show", "a b", "-f", "json", "-o", "/dev/stdout"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["key_tokens"] == ["a", "b"]


@pytest.mark.parametrize(
    ("shell", "message"),
    [
        ("show x -f json >&-", "standard output is closed"),
        ("show x -f npz >&-", "standard output is closed"),
        ("--version >&-", "standard output is closed"),
        ("--help > /dev/full", "No space left on device"),
        ("models -f json > /dev/full", "No space left on device"),
    ],
)
@pytest.mark.slow
def test_output_that_cannot_be_written_is_one_line_and_exit_1(shell, message):
    import subprocess
    import sys

    result = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m attnviz {shell}"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr == f"attnviz: error: {message}\n"


@pytest.mark.slow
def test_text_that_is_not_utf8_and_an_ascii_locale(tmp_path):
    import os
    import subprocess

    attnviz_command = [*ATTNVIZ]
    bad = subprocess.run([*attnviz_command, "show", b"caf\xe9", "-f", "json"], capture_output=True)
    assert bad.returncode == 2
    assert b"the text is not UTF-8 text: byte 0xe9 at offset 3" in bad.stderr
    ascii_only = subprocess.run(
        [*attnviz_command, "show", "café 我", "-f", "terminal", "--width", "60"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert ascii_only.returncode == 0, ascii_only.stderr
    assert b"\\xb7" in ascii_only.stdout  # the middle dot, escaped


def test_a_termination_that_a_library_turned_into_another_error_still_exits_143(
    runner, monkeypatch
):
    """SIGTERM raises in whatever code runs; an extension module being imported can turn
    that into an error of its own. The exit is still the signal's, with no error line."""
    from attnviz.cli.app import Terminated

    def terminated_inside_a_library(text):
        try:
            raise Terminated(143)
        except Terminated as signal:
            raise RuntimeError("initialization of _C raised unreported exception") from signal

    monkeypatch.setattr("attnviz.cli.output.read_texts", terminated_inside_a_library)
    result = runner.invoke(app, ["show", "Hello"])
    assert result.exit_code == 143
    assert result.stderr == "" and result.stdout == ""


def test_ctrl_c_that_a_library_turned_into_another_error_is_still_an_interruption(
    runner, monkeypatch
):
    def interrupted_inside_a_library(text):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as signal:
            raise RuntimeError("initialization of _C raised unreported exception") from signal

    monkeypatch.setattr("attnviz.cli.output.read_texts", interrupted_inside_a_library)
    result = runner.invoke(app, ["show", "Hello"])
    assert result.exit_code == 130
    assert result.stderr == "attnviz: error: interrupted\n"  # as a Ctrl-C anywhere else


def test_signals_wait_while_torch_is_imported_then_arrive():
    """Torch's import calls back into Python from C++, where a signal's exception aborts
    the process; Ctrl-C and SIGTERM are held meanwhile and delivered right after."""
    import os
    import signal

    from attnviz import signals

    arrived: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: arrived.append(number))
    try:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # bytecodes, where a handler would run
                pass
            assert arrived == []
        assert arrived == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
