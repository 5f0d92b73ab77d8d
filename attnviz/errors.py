"""Exit codes and the error types that carry them.

Every failure a user can cause is an :class:`AttnvizError`; the CLI maps it to
a one-line message and its exit code in one place (``attnviz.cli.app``).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    RUNTIME_ERROR = 1
    USAGE_ERROR = 2
    PARTIAL_FAILURE = 3
    INTERRUPTED = 130


class AttnvizError(Exception):
    """A failure with a message meant for the user."""

    exit_code: ExitCode = ExitCode.RUNTIME_ERROR


class UsageError(AttnvizError, ValueError):
    """The request itself is wrong: bad text, an index out of range, clashing options."""

    exit_code = ExitCode.USAGE_ERROR
