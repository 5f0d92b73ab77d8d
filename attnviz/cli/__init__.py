"""The command line: thin commands that parse, call the core and render."""

import contextlib
import errno
import io
import os
import signal
import sys

from attnviz.cli.app import Terminated, app


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _ClosedStream(io.TextIOBase):
    """Standard output when the process was started with it closed (``>&-``): writing
    to it is an error with a message, like writing to any file that cannot be written."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    @property
    def buffer(self) -> "_ClosedStream":
        """Its binary side (data is written as bytes): closed alike."""
        return self


def _terminate(signal_number: int, _frame: object) -> None:
    raise Terminated(128 + signal_number)


def main() -> None:
    """The ``attnviz`` console script."""
    if sys.stdout is None:
        sys.stdout = _ClosedStream()
    # SIGTERM unwinds like Ctrl-C, so that no temporary file or worker is left behind.
    signal.signal(signal.SIGTERM, _terminate)
    for stream in (sys.stdout, sys.stderr):  # an ASCII or Latin-1 locale: escape, never crash
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        app()
        status = 0
    except SystemExit as exit_request:
        status = _exit_status(exit_request.code)
    # Tearing down an interpreter that imported torch takes ~0.2 s, longer than
    # a small `show` runs. Every output is complete and flushed by now, and
    # attnviz registers no exit handlers, so the process ends here; unless a
    # measuring tool that reports at exit (coverage) runs inside it.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # gone (| head), or none
            stream.flush()
    if "coverage" in sys.modules:
        sys.exit(status)
    os._exit(status)


__all__ = ["app", "main"]
