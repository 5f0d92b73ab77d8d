"""Real attnviz processes, for the tests where processes, pipes, signals or streams are
the point (everything else runs in-process, through typer's CliRunner)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

ATTNVIZ = [sys.executable, "-m", "attnviz"]  # the command, as an argument list
IN_A_SHELL = f"{sys.executable} -m attnviz"  # the command, as a shell line starts it


def attnviz(*arguments: Any, stdin: bytes | str | None = None, **options: Any):
    """attnviz run to its end with ``arguments``, its stdout and stderr captured (bytes,
    unless ``text=True``)."""
    options.setdefault("timeout", 300)
    return subprocess.run([*ATTNVIZ, *arguments], input=stdin, capture_output=True, **options)


def shell(command: str) -> subprocess.CompletedProcess:
    """A bash command line, run to its end; with pipefail, a pipeline fails when any of its
    commands does."""
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120
    )


def start(*arguments: Any, **options: Any) -> subprocess.Popen:
    """attnviz started and left running: for signals, and for streams read as they come."""
    return subprocess.Popen([*ATTNVIZ, *arguments], **options)
