"""Reading inputs and writing outputs, with nothing half-written on failure."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from attnviz.errors import AttnvizError, UsageError

STDIO = "-"


def read_text_argument(text: str) -> str:
    """The TEXT argument itself, or all of standard input when it is ``-``."""
    if text != STDIO:
        return text
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("TEXT is '-' but standard input is a terminal: pipe some text in")
    try:
        data = sys.stdin.buffer.read()
    except OSError as error:
        raise AttnvizError(f"cannot read standard input: {error.strerror or error}") from None
    try:
        return data.decode("utf-8").removesuffix("\n")
    except UnicodeDecodeError as error:
        byte, offset = data[error.start], error.start
        raise UsageError(
            f"standard input is not UTF-8 text: byte 0x{byte:02x} at offset {offset}"
        ) from None


def write_text(content: str, destination: str | Path) -> None:
    """Write ``content`` to stdout (``-``) or atomically to a file.

    A file is written under a temporary name in its own folder and renamed
    into place, so an interrupted write never leaves a truncated file.
    """
    if str(destination) == STDIO:
        sys.stdout.write(content)
        sys.stdout.flush()
        return
    path = Path(destination)
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory; give a file name")
    folder = path.parent
    if not folder.is_dir():
        raise AttnvizError(f"cannot write {path}: folder {folder} does not exist")
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as error:
        raise AttnvizError(f"cannot write {path}: {error.strerror}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def dump_json(document: dict[str, Any]) -> str:
    """The one JSON spelling of every document attnviz writes: compact, UTF-8, one line."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"
