"""Reading the texts a command is given: an argument, a whole file (``@PATH``; ``@-``
for the whole of stdin) as one text, or stdin's lines (``-``), each line one input;
decoded as UTF-8."""

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


FILE_PREFIX = "@"  # a TEXT that names a file, as curl's -d @file and pip's @ read one
_LITERAL_AT = "@@"  # a text that begins with @ itself


def read_texts(text: str) -> Iterator[str]:
    """The inputs named by a TEXT argument: the text itself, each line of stdin for ``-``,
    or the whole of a file for ``@PATH`` (of stdin for ``@-``), newlines kept.

    Lines are read and yielded one at a time, so a stream is answered as it
    arrives. Blank lines are skipped; a stdin with no text at all is an error.
    """
    if text.startswith(_LITERAL_AT):
        yield text[1:]
        return
    if text.startswith(FILE_PREFIX):
        yield read_whole(text[1:])
        return
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


def read_whole(path: str) -> str:
    """A file (or stdin, for ``-``) as one text: every newline inside kept, the line ending
    that closes the file dropped, as a line reader would."""
    where = "standard input" if path == STDIO else path
    try:
        if path == STDIO:
            data = stdin_bytes().read()
        else:
            with open(path, "rb") as file:
                data = file.read()
    except FileNotFoundError:
        raise UsageError(
            f"no such file: {path} (a TEXT that begins with @ names a file; write @@ for a "
            "text that begins with @)"
        ) from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder: @ takes a file of text") from None
    except OSError as error:
        raise UsageError(f"cannot read {where}: {error.strerror or error}") from None
    if data.startswith(_ZIP):
        raise UsageError(f"{where} is an npz archive (attention maps?), not text")
    whole = decode(data, where).removeprefix(BOM)
    whole = whole.removesuffix("\n").removesuffix("\r")
    if not whole.strip():
        raise UsageError(f"{where} holds no text: give some words to look at")
    if whole.startswith(_SAVED_MAPS):
        raise UsageError(f"{where} holds attention maps that attnviz wrote, not text")
    return whole
