"""Exit codes and the error types that carry them.

Every failure a user can cause is an :class:`AttnvizError`; the CLI maps it to
a one-line message and its exit code in one place (``attnviz.cli.app``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    OK = 0
    RUNTIME_ERROR = 1
    USAGE_ERROR = 2
    PARTIAL_FAILURE = 3
    THRESHOLD_EXCEEDED = 4  # diff --fail-above: the maps differ more than allowed
    INTERRUPTED = 130


class AttnvizError(Exception):
    """A failure with a message meant for the user."""

    exit_code: ExitCode = ExitCode.RUNTIME_ERROR


class AttnvizWarning(UserWarning):
    """Something the user should know that did not stop the work (the CLI shows one line)."""


def warn(message: str) -> None:
    """An :class:`AttnvizWarning`, said where the caller's own code called attnviz (the
    first frame outside the package), not at a line of attnviz's."""
    import sys
    import warnings

    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, AttnvizWarning, stacklevel=level)


_PACKAGE = str(Path(__file__).resolve().parent)
# Whether messages name options as the command line spells them (set while a command
# runs) or as Extractor's keyword arguments (from Python).
_FLAGS: ContextVar[bool] = ContextVar("attnviz_flags", default=False)


@contextlib.contextmanager
def flags_named() -> Iterator[None]:
    """While open, :func:`option` names options as flags (the command line's)."""
    token = _FLAGS.set(True)
    try:
        yield
    finally:
        _FLAGS.reset(token)


def option(flag: str, value: object = None) -> str:
    """An option as the reader wrote it: ``--refine K`` on the command line, ``refine=K``
    from Python (a word given as a value in quotes there: ``method="gradient"``; a switch
    off, ``--no-prune``, as ``prune=False``)."""
    if _FLAGS.get():
        return flag if value is None else f"{flag} {value}"
    if flag.startswith("--no-") and value is None:
        return f"{flag.removeprefix('--no-').replace('-', '_')}=False"
    keyword = flag.removeprefix("--").replace("-", "_")
    if value is None:
        return keyword
    quoted = isinstance(value, str) and value.islower()
    return f'{keyword}="{value}"' if quoted else f"{keyword}={value}"


class ThresholdExceeded(AttnvizError):
    """A check asked for on the command line failed: not a crash, a finding."""

    exit_code = ExitCode.THRESHOLD_EXCEEDED


class SchemaError(AttnvizError):
    """A saved document that is not a valid AttentionMaps document."""


class UsageError(AttnvizError, ValueError):
    """The request itself is wrong: bad text, an index out of range, clashing options."""

    exit_code = ExitCode.USAGE_ERROR


def refuse(*rules: tuple[bool, str]) -> None:
    """Raise a :class:`UsageError` saying the first of ``rules`` (a clash, then what it
    means) whose clash is there."""
    for clash, message in rules:
        if clash:
            raise UsageError(message)


def is_out_of_memory(error: BaseException) -> bool:
    """Python's MemoryError, torch's OutOfMemoryError (GPU) and its CPU allocator's failure,
    which torch raises as a plain RuntimeError."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
    )


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def describe(error: BaseException) -> tuple[ExitCode, str]:
    """The exit code and the one-line message for any failure."""
    if isinstance(error, AttnvizError):
        return error.exit_code, str(error)
    if isinstance(error, KeyboardInterrupt):
        return ExitCode.INTERRUPTED, "interrupted"
    if is_out_of_memory(error):
        return ExitCode.RUNTIME_ERROR, (
            "out of memory: select fewer layers and heads (--layer, --head), a smaller "
            "--batch-size, or a shorter text"
        )
    if isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else ""
        return ExitCode.RUNTIME_ERROR, f"{error.strerror or error}{where}"
    return (
        ExitCode.RUNTIME_ERROR,
        f"unexpected {type(error).__name__}: {error} (a bug in attnviz; rerun with --debug "
        "for the traceback and report it)",
    )
