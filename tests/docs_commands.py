"""The commands the manual prints together with their output, read from its pages, and how
an output is held to what a page prints.

A page prints a command's output in two ways: a ``sh`` block of one command directly
followed by a ``text`` block (what it writes to stdout, its first lines: a page leaves out
the columns' explanations below a table), or a block of terminal lines, ``$ attnviz …``
and then what the terminal shows (stdout and stderr as they come).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


@dataclass(frozen=True)
class ShownRun:
    page: str
    arguments: tuple[str, ...]  # after `attnviz`
    printed: tuple[str, ...]  # the lines the page prints, right-stripped
    terminal: bool  # a terminal's lines (stdout and stderr), else stdout alone

    @property
    def model(self) -> str:
        """The model the command reads (builtin without --model)."""
        arguments = list(self.arguments)
        return arguments[arguments.index("--model") + 1] if "--model" in arguments else "builtin"

    def __str__(self) -> str:  # a test's id
        return f"{self.page}: attnviz {shlex.join(self.arguments)}"[:90]


def _arguments(command: str) -> tuple[str, ...]:
    words = shlex.split(command.replace("\\\n", " "))
    assert words[0] == "attnviz", command
    return tuple(words[1:])


def shown_runs() -> list[ShownRun]:
    """Every command a page prints the output of, in page order."""
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        blocks = list(_BLOCK.finditer(text))
        for block, following in zip(blocks, [*blocks[1:], None], strict=False):
            kind, body = block.group(1), block.group(2)
            if kind == "sh" and following is not None and following.group(1) == "text":
                if text[block.end() : following.start()].strip() == "":
                    printed = tuple(line.rstrip() for line in following.group(2).splitlines())
                    found.append(ShownRun(path.name, _arguments(body), printed, terminal=False))
            elif kind in ("", "text") and body.startswith("$ attnviz "):
                for session in re.split(r"^\$ ", body, flags=re.M)[1:]:
                    command, *lines = session.splitlines()
                    printed = tuple(line.rstrip() for line in lines)
                    found.append(ShownRun(path.name, _arguments(command), printed, terminal=True))
    return found


# A time a run measures (``about 684 s``): it is the machine's, not the program's.
_SECONDS = re.compile(r"\b\d[\d,]*(?:\.\d+)? s\b")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def _pieces(line: str) -> list[str | float]:
    """A line as its texts and its numbers, a time left as a word."""
    line = _SECONDS.sub("(seconds)", line)
    pieces: list[str | float] = []
    at = 0
    for number in _NUMBER.finditer(line):
        pieces.append(line[at : number.start()])
        pieces.append(float(number.group().replace(",", "")))
        at = number.end()
    return [*pieces, line[at:]]


def assert_printed(run: ShownRun, output: str, tolerance: float = 2e-3) -> None:
    """The output begins with the lines the page prints: the same text, each number within
    ``tolerance`` of the page's (the last printed digit of float32 sums may differ from one
    CPU to another), and each measured time any time."""
    lines = [line.rstrip() for line in output.splitlines()]
    assert len(lines) >= len(run.printed), (run.printed, lines)
    for printed, line in zip(run.printed, lines, strict=False):
        expected, got = _pieces(printed), _pieces(line)
        same = len(expected) == len(got) and all(
            abs(a - b) <= tolerance if isinstance(a, float) and isinstance(b, float) else a == b
            for a, b in zip(expected, got, strict=True)
        )
        assert same, f"{run}\n  page: {printed}\n  run:  {line}"


def terminal_output(arguments: tuple[str, ...], cwd: Path, lines: int, columns: int = 250) -> str:
    """What a terminal of ``columns`` columns without colour (NO_COLOR) shows of a real
    ``attnviz`` process, its stdout and stderr on one pseudo-terminal, up to its first
    ``lines`` lines: a long run is stopped there (a page prints what it says first)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environment = {**os.environ, "NO_COLOR": "1", "TERM": "xterm"}
    environment.pop("COLUMNS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "attnviz", *arguments],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        env=environment,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
        if len(as_shown(b"".join(chunks), columns).splitlines()) > lines:
            break  # its lines so far are whole: the next one has begun
    process.kill()
    process.wait(timeout=60)
    os.close(leader)
    return as_shown(b"".join(chunks), columns)


def as_shown(stream: bytes, columns: int, rows: int = 500) -> str:
    """What a terminal's screen holds after ``stream``: a bar redrawn in place (carriage
    returns, erased lines) leaves its last state; styles are not characters."""
    import pyte

    screen = pyte.Screen(columns, rows)
    pyte.ByteStream(screen).feed(stream)
    shown = [line.rstrip() for line in screen.display]
    while shown and not shown[-1]:
        shown.pop()
    return "\n".join(shown)


def output_of(run: ShownRun, runner, cwd: Path) -> str:
    """What ``run`` gives: a terminal's lines from a real process (``cwd`` its folder), or
    its stdout, run in this process by ``runner`` (typer's) in 250 columns."""
    if run.terminal:
        return terminal_output(run.arguments, cwd, len(run.printed))
    from attnviz.cli import app

    found = runner.invoke(app, list(run.arguments), env={"COLUMNS": "250"})
    assert found.exit_code == 0, found.stderr
    return found.stdout
