"""Reading the texts a command is given: an argument, a file of lines or stdin, decoded
as UTF-8, each line one input."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO

from attnviz.errors import AttnvizError, UsageError
from attnviz.files import STDIO

BOM = "\ufeff"  # a byte-order mark some editors put first: not text


def decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        byte, offset = data[error.start], error.start
        raise UsageError(
            f"{where} is not UTF-8 text: byte 0x{byte:02x} at offset {offset}"
        ) from None


def stdin_bytes() -> IO[bytes]:
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("'-' reads standard input, but it is a terminal: pipe something in")
    return sys.stdin.buffer


_SAVED_MAPS = '{"schema_version"'  # how every document attnviz writes begins
_ZIP = b"PK\x03\x04"  # how every zip archive (an npz) begins
_NOT_TEXT = (
    "standard input holds {}, not text: render - draws saved maps, heads --from - and "
    "top --from - analyse them"
)


def read_texts(text: str) -> Iterator[str]:
    """The inputs named by a TEXT argument: the text itself, or each line of stdin for ``-``.

    Lines are read and yielded one at a time, so a stream is answered as it
    arrives. Blank lines are skipped; a stdin with no text at all is an error.
    """
    if text != STDIO:
        yield text
        return
    stream = stdin_bytes()
    seen = False
    try:
        for number, raw in enumerate(stream, start=1):
            if number == 1 and raw.startswith(_ZIP):
                raise UsageError(_NOT_TEXT.format("an npz archive (attention maps?)"))
            line = decode(raw, f"standard input line {number}").rstrip("\r\n")
            if number == 1:
                line = line.removeprefix(BOM)
            if line.strip():
                if not seen and line.startswith(_SAVED_MAPS):
                    raise UsageError(_NOT_TEXT.format("attention maps that attnviz wrote"))
                seen = True
                yield line
    except OSError as error:
        raise AttnvizError(f"cannot read standard input: {error.strerror or error}") from None
    if not seen:
        raise UsageError("standard input holds no text: give some words to look at")
