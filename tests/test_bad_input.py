"""The bad-input suite: one clear line on stderr, the documented exit code, no traceback,
and nothing half-written. Usage errors run in-process (they import no model); what is
about processes, files and streams runs through the real `attnviz` process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from attnviz.cli import app
from attnviz.memory import Room
from tests import tiny_models
from tests.checks import failed_in_process
from tests.processes import IN_A_SHELL, attnviz, shell


def invoke(runner, arguments, stdin: bytes | None = None):
    return runner.invoke(app, arguments, input=stdin)


def one_error_line(result, code: int, message: str) -> None:
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == code, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("attnviz: error: ")]
    assert len(errors) == 1, stderr
    assert message in errors[0], stderr


def test_saved_maps_piped_in_as_text_are_refused_with_the_command_that_reads_them(runner):
    saved = runner.invoke(app, ["show", "Hello I love you", "-f", "ndjson"])
    assert saved.exit_code == 0, saved.stderr
    for command in (["heads", "-"], ["top", "-"], ["show", "-"], ["export", "-", "-o", "x.png"]):
        result = runner.invoke(app, command, input=saved.stdout)
        failed_in_process(result, 2, "standard input holds attention maps that attnviz wrote")
        assert "heads --from -" in result.stderr
    analysed = runner.invoke(app, ["heads", "--from", "-", "-f", "json"], input=saved.stdout)
    assert analysed.exit_code == 0, analysed.stderr
    assert len(json.loads(analysed.stdout)["heads"]) == 8


@pytest.mark.parametrize(
    ("arguments", "stdin", "code", "message"),
    [
        (["show", ""], None, 2, "the text is empty"),
        (["show", " \t\n "], None, 2, "the text is empty"),
        (["show", "-"], b"", 2, "standard input holds no text"),
        (["show", "-"], b"\n  \n", 2, "standard input holds no text"),
        (["show", "-", "-f", "json"], b"caf\xe9\n", 2, "line 1 is not UTF-8 text: byte 0xe9"),
        (["show", "@missing.txt"], None, 2, "no such file: missing.txt (a TEXT that begins"),
        (["show", "@."], None, 2, ". is a folder: @ takes a file of text"),
        (["show", "@-"], b"\n \n", 2, "standard input holds no text"),
        (["heads", "@-"], b"caf\xe9", 2, "standard input is not UTF-8 text: byte 0xe9"),
        (["show", "@-"], b'{"schema_version":2}', 2, "holds attention maps that attnviz wrote"),
        (["show", "hi", "--layer", "7"], None, 2, "layer 7 is out of range"),
        (["show", "hi", "--layer", "-3"], None, 2, "layer -3 is out of range"),
        (["show", "hi", "--head", "1-x"], None, 2, "is not an index, a list"),
        (["show", "hi", "--head", "3-1"], None, 2, "runs backwards"),
        (["show", "hi", "--layer", ",,"], None, 2, "is not an index"),
        (["show", "hi", "--num-layers", "0"], None, 2, "Invalid value for '--num-layers'"),
        (["show", "hi", "--format", "xml"], None, 2, "for '--format' / '-f': 'xml' is not one of"),
        (["render", "missing.json"], None, 2, "no such file: missing.json"),
        (["batch", "missing.txt", "-o", "out"], None, 2, "no such input file"),
        (["diff", "a", "b", "c"], None, 2, "give one TEXT with --against"),
        (["explain", "a b", "--layer", "0-1"], None, 2, "explain walks through one layer"),
    ],
)
def test_bad_requests(runner, tmp_path, monkeypatch, arguments, stdin, code, message):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, arguments, input=stdin)
    assert result.exit_code == code, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("attnviz: error: ")
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_several_inputs_where_one_is_read_say_what_to_do_instead(runner, tmp_path):
    two_lines = b"one two\nthree four\n"
    picture = tmp_path / "x.png"
    failed_in_process(invoke(runner, ["export", "-", "-o", str(picture)], two_lines), 2, "batch")
    failed_in_process(invoke(runner, ["heads", "-"], two_lines), 2, "attnviz stats gives these")
    saved = invoke(runner, ["show", "-", "-f", "ndjson"], two_lines)
    assert saved.exit_code == 0 and saved.stdout.count("\n") == 2
    render = ["render", "-", "-o", str(picture)]
    failed_in_process(invoke(runner, render, saved.stdout.encode()), 2, "pick one line")
    assert not picture.exists()


@pytest.mark.slow
def test_nul_bytes_and_escapes_are_data(tmp_path):
    text = "a\x00b \x1b[2J\x1b[31mred [bold]x[/bold] \u202eevil"
    result = attnviz("show", "-", "-f", "terminal", "--width", "200", stdin=text.encode())
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "\x1b" not in out and "\x00" not in out and "\u202e" not in out
    assert "␀" in out and "␛" in out and "[" in out and "bold" in out


def test_a_hundred_thousand_characters(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = "word " * 20_000  # 100,000 characters, 20,000 tokens
    result = runner.invoke(
        app, ["show", "-", "--layer", "0", "--head", "0", "-f", "npz", "-o", "maps.npz"], input=text
    )
    assert result.exit_code == 0, result.stderr
    assert "reads at most 4096: the last 15904 were dropped" in result.stderr
    assert (tmp_path / "maps.npz").stat().st_size > 0


def test_paths_that_cannot_be_used(runner, tmp_path):
    unreadable = tmp_path / "secret.json"
    unreadable.write_text("{}")
    unreadable.chmod(0)
    if os.access(unreadable, os.R_OK):  # root reads anything: try a directory instead
        failed_in_process(invoke(runner, ["render", str(tmp_path)]), 2, "is a directory")
    else:
        failed_in_process(invoke(runner, ["render", str(unreadable)]), 1, "cannot read")
    failed_in_process(
        invoke(runner, ["show", "hi", "-f", "json", "-o", str(tmp_path)]), 2, "it is a directory"
    )
    failed_in_process(
        invoke(runner, ["show", "hi", "-f", "json", "-o", str(tmp_path / "no" / "x.json")]),
        1,
        "does not exist",
    )
    failed_in_process(
        invoke(runner, ["export", "hi", "-o", str(tmp_path / "x.gif")]), 2, "name it .png"
    )
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_a_folder_that_cannot_be_written(runner, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    if os.access(folder, os.W_OK):  # root writes anywhere a mode allows: use /proc instead
        folder = Path("/proc")
    try:
        failed_in_process(
            invoke(runner, ["show", "hi", "-f", "json", "-o", str(folder / "x.json")]),
            1,
            "cannot write",
        )
        failed_in_process(
            invoke(runner, ["batch", "-", "-o", str(folder / "out")], b"hi\n"), 1, "cannot"
        )
    finally:
        (tmp_path / "locked").chmod(0o700)


@pytest.mark.slow
def test_a_model_folder_with_truncated_weights(runner, tmp_path):
    model = tiny_models.bert(tmp_path / "bert")
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    failed_in_process(
        invoke(runner, ["show", "hi", "--model", str(model)]), 1, "cannot load the weights of"
    )


def test_a_model_folder_that_is_not_a_model(runner, tmp_path):
    failed_in_process(
        invoke(runner, ["show", "hi", "--model", str(tmp_path)]), 1, "is not a transformers model"
    )


def test_a_batch_with_bad_lines_records_them(runner, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"text": "fine"}\n"just a string"\n{"text": 5}\n\xff\n')
    result = invoke(runner, ["batch", str(source), "-o", str(tmp_path / "out"), "-f", "json"])
    assert result.exit_code == 3
    assert (
        "attnviz: error: 3 of 4 inputs failed (first: line 2 is not a JSON object);"
        in result.stderr
    )
    manifest = (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()
    assert len(manifest) == 4


@pytest.mark.slow
def test_broken_pipes_end_quietly(tmp_path):
    source = tmp_path / "lines.txt"
    source.write_text("The man walked the dog\n" * 300)
    result = shell(f"{IN_A_SHELL} show - < {source} | head -c 10")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout == '{"schema_v'


def test_debug_shows_the_traceback(tmp_path):
    result = attnviz("--debug", "show", "hi", "--model", tmp_path)
    assert result.returncode != 0
    assert b"Traceback" in result.stderr


def test_copying_a_model_needs_a_tokenizer(runner, tmp_path):
    model = tiny_models.gpt2(tmp_path / "gpt2")
    bare = tmp_path / "bare"
    shutil.copytree(model, bare)
    (bare / "tokenizer.json").unlink()
    (bare / "tokenizer_config.json").unlink()
    failed_in_process(invoke(runner, ["show", "hi", "--model", str(bare)]), 1, "has no tokenizer")


def test_running_out_of_memory_says_what_to_reduce(runner, monkeypatch):
    def exhausted(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB")

    monkeypatch.setattr("attnviz.builtin.extractor.BuiltinExtractor._extract", exhausted)
    result = runner.invoke(app, ["show", "a b", "-f", "json"])
    assert result.exit_code == 1
    assert result.stderr.startswith("attnviz: error: out of memory: select fewer layers and heads")


def test_a_stack_too_big_for_the_machine_is_refused_with_an_estimate(runner):
    result = runner.invoke(app, ["show", "a b", "--d-model", "4096", "--num-layers", "64"])
    assert result.exit_code == 2
    # 112 GiB of weights; what torch maps counts only where it is not imported yet
    assert re.search(
        r"needs about 11[78]\.\d GiB to build \(its weights, float32, and torch", result.stderr
    )


def test_stack_maps_too_big_for_the_memory_free_are_refused_before_they_are_made(
    runner, monkeypatch
):
    monkeypatch.setattr("attnviz.memory.room", lambda: Room(8 * 2**30, "available"))
    built = []
    monkeypatch.setattr(
        "attnviz.builtin.model.BuiltinTransformer.__init__", lambda *a: built.append(a)
    )
    words = " ".join(f"w{i}" for i in range(1000))
    stack = ["--num-layers", "64", "--num-heads", "64", "--d-model", "256"]
    result = runner.invoke(app, ["show", "-", *stack, "--rows", "last", "-f", "npz"], input=words)
    assert result.exit_code == 2 and result.stdout == "" and not built
    assert result.stderr.startswith(
        "attnviz: error: the built-in stack's maps of 1000 × 1000 tokens need about 31.2 GiB"
    )
    assert result.stderr.count("\n") == 1
    monkeypatch.undo()
    small = runner.invoke(app, ["show", "-", "--rows", "last", "-f", "json"], input=words)
    assert small.exit_code == 0, small.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["show", "a b", "--top-heads", "2", "-f", "json"], "--top-heads applies to the"),
        (["show", "a b", "--top-heads", "2", "-a", "mean"], "--top-heads picks heads"),
        (["show", "a b", "-m", "cross", "-t", "c d", "--top-heads", "1", "--by", "self"], "cross"),
        (["show", "a b", "--view", "grid", "-f", "csv"], "--view grid applies to the"),
        (["show", "a b", "--values", "-o", "x.npz"], "not npz output: leave it out"),
        (["show", "a b", "--label-positions", "-f", "json"], "keep the tokens as they are"),
        (["show", "a b", "--dtype", "float16", "-f", "terminal"], "applies to data"),
        (["show", "a b", "--dtype", "float16", "-o", "x.png"], "not a png picture"),
        (["export", "a b", "-o", "x.png", "--figsize", "3"], "give width and height"),
        (["export", "a b", "-o", "x.png", "--figsize", "-1,2"], "between 0 and 100"),
        (["export", "a b", "-o", "x.png", "--figsize", "1,1", "--view", "head", "-l", "0",
          "--head", "0"], "leaves no room for the map"),
        (["export", "a b", "-o", "x.png", "--title", "T", "--no-title"], "pick one"),
        (["export", "a b", "-o", "x.png", "--top-heads", "2", "--view", "head"], "draws one map"),
    ],
)  # fmt: skip
def test_bad_choices_are_usage_errors(runner, tmp_path, monkeypatch, arguments, message):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["render", "{bad}/maps.json"],
        ["show", "a b", "-f", "json", "-o", "{bad}/no/such/maps.json"],
        ["batch", "{bad}/inputs.txt", "-o", "{bad}/out"],
        ["stats", "{bad}/inputs.txt"],
    ],
)
def test_a_path_in_a_message_is_shown_not_obeyed(runner, tmp_path, command):
    """A path holding terminal escapes (set the title, clear the screen) is quoted in the
    one error line with them made visible, as texts and labels are."""
    bad = tmp_path / "x\x1b]0;PWNED\x07\x1b[2Jy"
    command = [part.format(bad=bad) for part in command]
    result = runner.invoke(app, command)
    assert result.exit_code in (1, 2), result.stderr
    assert result.stderr.startswith("attnviz: error: ") and result.stderr.count("\n") == 1
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "␛]0;PWNED␇␛[2Jy" in result.stderr


@pytest.mark.parametrize("view", ["model", "head"])
def test_a_figure_too_large_to_draw_names_its_size_and_what_to_lower(runner, tmp_path, view):
    picture = tmp_path / "big.png"
    # 36,000 pixels a side: Agg's 32-bit offsets overflow and the process used to abort.
    arguments = ["export", "a b", "--figsize", "60,60", "--dpi", "600", "--view", view]
    result = runner.invoke(app, [*arguments, "--layer", "0", "--head", "0", "-o", str(picture)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "attnviz: error: a figure of 36,000 × 36,000 pixels (60 × 60 inches at 600 dpi) is too "
        "large to draw (at most 537 million pixels): lower --dpi or --figsize, or pool the maps "
        "(--pool)\n"
    )
    assert list(tmp_path.iterdir()) == []


# What a TEXT of @FILE (or stdin) reads: a device is refused, a source longer than
# attnviz reads is cut at MAX_TEXT_BYTES (its rest never read), a blocked read ends on
# SIGTERM. Before, `heads @/dev/zero` grew to 21 GB and ignored SIGTERM.


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_no_text(runner, device):
    failed_in_process(invoke(runner, ["heads", f"@{device}"]), 2, f"{device} is a device, not")
    failed_in_process(invoke(runner, ["batch", device, "-o", "out"]), 2, "is a device, not")


def test_standard_input_from_a_device_is_refused_and_dev_null_holds_no_text(tmp_path):
    import subprocess

    from tests.processes import ATTNVIZ

    for command, device, said in (
        ("heads", "/dev/zero", "standard input is a device, not a file of text"),
        ("show", os.devnull, "standard input holds no text"),
    ):
        with open(device, "rb") as stdin:
            result = subprocess.run(
                [*ATTNVIZ, command, "-"], stdin=stdin, capture_output=True, timeout=60
            )
        one_error_line(result, 2, said)


def test_an_endless_source_is_read_up_to_the_limit_and_said(runner, tmp_path, monkeypatch):
    """A FIFO that `yes` would feed forever: read up to the limit (cut at a character's
    start), one warning, and the writer left with nobody reading."""
    import threading

    import attnviz.inputs

    monkeypatch.setattr(attnviz.inputs, "MAX_TEXT_BYTES", 996)  # within an é
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as out:
            while True:
                out.write("héllo ".encode() * 100)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    result = invoke(runner, ["show", f"@{fifo}", "-f", "json"])
    writer.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert not writer.is_alive()
    assert result.stderr == (
        f"attnviz: warning: {fifo} is longer than 996 bytes: its first 996 bytes are read, "
        "the rest was dropped\n"
    )
    assert json.loads(result.stdout)["text"] == "héllo " * 142 + "h"


def test_a_line_of_stdin_longer_than_the_limit_is_cut_and_the_next_read(runner, monkeypatch):
    import attnviz.inputs

    monkeypatch.setattr(attnviz.inputs, "MAX_TEXT_BYTES", 100)
    lines = b"a " * 500 + b"\nthe next line\n"
    result = invoke(runner, ["show", "-", "-f", "ndjson"], stdin=lines)
    assert result.exit_code == 0, result.stderr
    assert "standard input line 1 is longer than 100 bytes" in result.stderr
    texts = [json.loads(line)["text"] for line in result.stdout.splitlines()]
    assert texts == ["a " * 50, "the next line"]


class EndlessLine(io.RawIOBase):
    """`tr '\\0' a < /dev/zero`: a line that never ends, counting what was read (it
    ends after 64 MiB, so that a reader that would go on forever fails, not hangs)."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.read_bytes >= 64 << 20:
            return 0
        buffer[:] = b"a" * len(buffer)
        self.read_bytes += len(buffer)
        return len(buffer)


def test_a_stdin_line_that_never_ends_is_read_up_to_the_limit(runner, monkeypatch):
    import attnviz.inputs

    monkeypatch.setattr(attnviz.inputs, "MAX_TEXT_BYTES", 100)
    endless = EndlessLine()
    monkeypatch.setattr(attnviz.inputs, "stdin_bytes", lambda: io.BufferedReader(endless))
    result = invoke(runner, ["show", "-", "-f", "ndjson"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        "attnviz: warning: standard input line 1 is longer than 100 bytes: its first 100 "
        "bytes are read, the rest of the input is not read\n"
    )
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == ["a" * 100]
    assert endless.read_bytes < 100 * attnviz.inputs._PIECE  # the rest never read


@pytest.mark.slow
def test_sigterm_ends_a_read_that_waits_at_once(tmp_path):
    """A FIFO nobody writes to: the read waits; SIGTERM ends it, exit 143."""
    import signal
    import subprocess
    import time

    from tests.processes import ATTNVIZ

    fifo = tmp_path / "silent"
    os.mkfifo(fifo)
    process = subprocess.Popen([*ATTNVIZ, "heads", f"@{fifo}"], stderr=subprocess.PIPE)
    time.sleep(3)  # started, waiting for a writer
    assert process.poll() is None
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 143
    assert time.monotonic() - started < 5
    assert b"Traceback" not in process.stderr.read()


def test_a_width_past_what_attnviz_draws_is_refused_or_clamped_before_drawing(runner):
    """--width 99999999 (or COLUMNS=999999999) drew for minutes in gigabytes."""
    failed_in_process(
        invoke(runner, ["show", "hello", "--width", "100000000"]),
        2,
        "Invalid value for '--width': Input should be less than or equal to 2000",
    )
    result = runner.invoke(app, ["show", "hello", "-f", "terminal"], env={"COLUMNS": "100000000"})
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        "attnviz: warning: COLUMNS=100000000 is wider than attnviz draws: drawing in 2000\n"
    )
    assert max(len(line) for line in result.stdout.splitlines()) <= 2000


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["export", "a b", "-o", "a.png", "--vmax", "nan"],
            "'nan' is not a number from 1e-06 to 1",
        ),
        (["export", "a b", "-o", "a.png", "--font-size", "inf"], "'inf' is not a number from 4"),
        (["export", "a b", "-o", "a.png", "--vmax", "x"], "'x' is not a number ("),
        (["diff", "a", "b", "--fail-above", "nan"], "'nan' is not a number of at least 0"),
        (["generate", "a", "--temperature", "nan"], "'nan' is not a number of at least 1e-06"),
    ],
)
def test_a_number_option_given_no_number_says_so(runner, arguments, message):
    """--vmax nan was refused as 'should be less than or equal to 1'."""
    failed_in_process(invoke(runner, arguments), 2, message)


def test_a_knockout_whose_span_holds_a_colon_says_how_it_was_split(runner, tmp_path):
    model = str(tiny_models.gpt2(tmp_path / "gpt2", lm=True))
    arguments = ["heads", "--model", model, "the man walked", "--answer", "x"]
    failed_in_process(
        invoke(runner, [*arguments, "--knockout", "1:2:3"]),
        2,
        "--knockout '1:2:3' is ROWS '1' and SPAN '2:3' (ROWS ends at the first colon), and "
        "'2:3' is not in the text",
    )


# A token that would move the cursor (ESC), ring the bell (BEL), return the carriage
# (CR) or turn the line around (a right-to-left override): no format of any command
# that writes text may carry one raw. JSON escapes the first three itself and the
# override as \u202e; the terminal, tables and CSV show them as ␛, ␇, ␍, \u202e.
HOSTILE = "a \x1b[31mred\x07 b\r c\u202eevil"
RAW = ("\x1b", "\x07", "\r", "\u202e")
TEXT_FORMATS = [
    ["show", "-f", "terminal"],
    ["show", "-f", "json"],
    ["show", "-f", "ndjson"],
    ["show", "-f", "csv"],
    ["heads", "-f", "table"],
    ["heads", "-f", "json"],
    ["heads", "-f", "csv"],
    ["top", "-f", "table"],
    ["top", "-f", "json"],
    ["explain", "-f", "json"],
    ["stats", "-f", "table"],  # stats reads a file: its one line is HOSTILE
    ["stats", "-f", "json"],
    ["stats", "-f", "csv"],
]
ANSWERED = ["--answer", " the", "--corrupt", HOSTILE]  # as many tokens: the same text
ANSWER_FORMATS = [
    ["trace", "-f", "table"],
    ["trace", "-f", "json"],
    ["trace", "-f", "csv"],
    ["heads", "-f", "table"],
    ["heads", "-f", "json"],
    ["heads", "-f", "csv"],
]


@pytest.mark.parametrize("command", TEXT_FORMATS, ids=" ".join)
def test_no_format_writes_a_tokens_control_characters_raw(runner, tmp_path, command):
    given = HOSTILE
    if command[0] == "stats":
        given = str(tmp_path / "corpus.txt")
        Path(given).write_text(HOSTILE.replace("\r", "") + "\n", encoding="utf-8")
    result = runner.invoke(app, [command[0], given, *command[1:]])
    assert result.exit_code == 0, result.stderr
    assert not [raw for raw in RAW if raw in result.stdout], result.stdout


@pytest.mark.parametrize("command", ANSWER_FORMATS, ids=" ".join)
def test_no_format_of_an_answers_commands_writes_control_characters_raw(
    runner, generators, command
):
    arguments = [command[0], HOSTILE, "--model", generators["gpt2-lm"], *ANSWERED]
    result = runner.invoke(app, [*arguments, *command[1:]])
    assert result.exit_code == 0, result.stderr
    assert not [raw for raw in RAW if raw in result.stdout], result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["show", "a b", "-f", "json", "-o", "{fifo}.json"],
        ["export", "a b", "-o", "{fifo}.png"],
        ["heads", "a b", "--model", "{gpt2}", "--answer", " c", "--picture", "{fifo}.png"],
    ],
)
def test_a_fifo_nobody_reads_is_refused_never_waited_on(generators, tmp_path, command):
    """Opening a FIFO to write waits for a reader: with none, the command ended its work
    and then blocked for ever. It is refused at once, one line, exit 1."""
    fifo = tmp_path / "pipe"
    arguments = [part.format(fifo=fifo, gpt2=generators["gpt2-lm"]) for part in command]
    os.mkfifo(arguments[-1])
    result = attnviz(*arguments, timeout=120)
    one_error_line(result, 1, "it is a named pipe that no process reads; start its reader")
    assert result.stdout == b""


def test_a_socket_as_the_output_is_refused_before_the_model_loads(runner, tmp_path):
    import socket

    path = tmp_path / "maps.json"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        result = invoke(runner, ["show", "a b", "--model", "no/such/model", "-o", str(path)])
    failed_in_process(result, 2, "it is a socket; give a file name")
