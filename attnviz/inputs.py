"""Inputs: reading the texts a command is given, and the :class:`Input` made of them.

A command's texts are an argument, a whole file (``@PATH``; ``@-`` for the whole of
stdin) as one text, or stdin's lines (``-``), each line one input; decoded as UTF-8. A
text is read up to :data:`MAX_TEXT_BYTES`, a piece at a time (so that Ctrl-C and
SIGTERM end a read at once), and a device is no text.

An :class:`Input` is one input to read: a text, its cross-mode target, an encoder's
sentence B, an answer, a second answer and a corrupted twin, each checked when the input
is made, before any model runs; :class:`Explaining` is what ``explain`` asks of one text.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from attnviz.atomic_files import STDIO
from attnviz.choices import Mode
from attnviz.errors import AttnvizError, UsageError, warn

# What attnviz reads of one text: some thirty times what the longest context it runs
# holds (Gemma 3's 32,768 tokens are about 130 KB of English), and a few seconds of
# tokenising. The rest of a longer source is never read: /dev/zero, a FIFO fed by
# `yes` or a 48 MB file end here.
MAX_TEXT_BYTES = 4 << 20
_PIECE = 1 << 20  # bytes read at a time


def text_size(count: int) -> str:
    return f"{count >> 20} MiB" if count % (1 << 20) == 0 else f"{count:,} bytes"


def refuse_device(status: os.stat_result, where: str) -> None:
    """A character or block device is no text: /dev/zero and /dev/urandom never end.
    /dev/null, which ends at once, is let through."""
    device = stat.S_ISCHR(status.st_mode) or stat.S_ISBLK(status.st_mode)
    if device and status.st_rdev != os.stat(os.devnull).st_rdev:
        raise UsageError(f"{where} is a device, not a file of text")


def read_bounded(stream: IO[bytes], where: str) -> bytes:
    """At most :data:`MAX_TEXT_BYTES` of ``stream``, read a piece at a time; a longer
    source is cut there (at a character's start), said in one line, its rest unread."""
    pieces: list[bytes] = []
    size = 0
    while size <= MAX_TEXT_BYTES and (piece := stream.read(min(_PIECE, MAX_TEXT_BYTES + 1 - size))):
        pieces.append(piece)
        size += len(piece)
    data = b"".join(pieces)
    if size > MAX_TEXT_BYTES:
        data = _whole_characters(data[:MAX_TEXT_BYTES])
        warn(
            f"{where} is longer than {text_size(MAX_TEXT_BYTES)}: its first "
            f"{text_size(MAX_TEXT_BYTES)} are read, the rest was dropped"
        )
    return data


def bounded_lines(stream: IO[bytes], where: str) -> Iterator[bytes]:
    """The lines of ``stream``, line ends kept, each at most :data:`MAX_TEXT_BYTES`: a
    longer line is cut there (said in one line) and its rest passed over unkept, as far
    as another :data:`MAX_TEXT_BYTES`; a line longer still ends the reading there (a
    line that never ends, ``tr '\\0' a < /dev/zero``, would be read forever)."""
    number = 0
    while line := stream.readline(MAX_TEXT_BYTES + 1):
        number += 1
        if len(line) > MAX_TEXT_BYTES and not line.endswith(b"\n"):
            passed, ended = 0, False
            while passed < MAX_TEXT_BYTES and (rest := stream.readline(_PIECE)):
                passed += len(rest)
                if ended := rest.endswith(b"\n"):
                    break
            ended = ended or passed < MAX_TEXT_BYTES  # the stream ended within the line
            dropped = "the rest was dropped" if ended else "the rest of the input is not read"
            warn(
                f"{where} line {number} is longer than {text_size(MAX_TEXT_BYTES)}: its "
                f"first {text_size(MAX_TEXT_BYTES)} are read, {dropped}"
            )
            yield _whole_characters(line[:MAX_TEXT_BYTES])
            if not ended:
                return
            continue
        yield line


def _whole_characters(data: bytes) -> bytes:
    """``data`` cut short of a UTF-8 character that its end splits."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # no continuation byte: where the last character begins
            length = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if length <= back else data[:-back]
    return data


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
    try:
        status = os.fstat(sys.stdin.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # no descriptor: a test's stream
        return sys.stdin.buffer
    refuse_device(status, "standard input")
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
        for number, raw in enumerate(bounded_lines(stream, "standard input"), start=1):
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


def read_option_text(value: str | None, option: str, text: str | None) -> str | None:
    """An option's text (``--answer``, ``--versus``, ``--corrupt``) read as a TEXT
    argument is: ``@PATH`` the whole of a file, ``@-`` all of stdin, ``@@`` a text that
    begins with ``@``, with the same limits; a long corrupted text cannot travel as an
    argument (Linux stops one at 128 KiB). Stdin is read once: ``@-`` where ``text``
    reads it too is refused."""
    if value is None or not value.startswith(FILE_PREFIX):
        return value
    if value.startswith(_LITERAL_AT):
        return value[1:]
    if value == FILE_PREFIX + STDIO and text in (STDIO, FILE_PREFIX + STDIO):
        raise UsageError(
            f"{option} @- and TEXT {text} would both read standard input: give one of them a file"
        )
    return read_whole(value[1:])


def read_whole(path: str) -> str:
    """A file (or stdin, for ``-``) as one text: every newline inside kept, the line ending
    that closes the file dropped, as a line reader would."""
    where = "standard input" if path == STDIO else path
    try:
        if path == STDIO:
            data = read_bounded(stdin_bytes(), where)
        else:
            refuse_device(os.stat(path), path)
            with open(path, "rb") as file:
                data = read_bounded(file, where)
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


# A text; a (text, target) pair for cross mode; or (text, target, pair) with sentence B.
Item = str | tuple[str, str | None] | tuple[str, str | None, str | None]


@dataclass(frozen=True)
class Input:
    """One input to read, each part checked when made: a text; ``target``, whose tokens
    attend over the text's in cross mode; ``pair``, sentence B of an encoder's sentence
    pair; ``answer``, the words a causal language model should go on with (effects and
    knockout read what heads do to its first token); ``versus``, a second answer, whose
    first token's logit the metric subtracts from the answer's; ``corrupt``, the text's
    corrupted twin (as many tokens, a fact changed) for patching and tracing; ``spans``,
    a circuit's pair's own named spans, (name, where) as ``--spans`` reads them
    (:func:`attnviz.circuits.spans.pair_spans` makes them from a pairs file's)."""

    text: str
    target: str | None = None
    pair: str | None = None
    answer: str | None = None
    versus: str | None = None
    corrupt: str | None = None
    spans: tuple[tuple[str, str], ...] | None = None

    def __post_init__(self) -> None:
        check_text(self.text, "text")
        for name in ("target", "pair"):
            if getattr(self, name) is not None:
                check_text(getattr(self, name), name)
        if self.answer is not None:
            check_answer(self.answer)
        # a corrupted twin without an answer is patched from by name (activations):
        # what else reads one needs the answer too (asked.check_asked)
        if self.versus is not None and self.answer is None:
            raise UsageError("--versus measures what heads do to an answer: give --answer")
        if self.versus is not None:
            check_answer(self.versus, "versus answer")
            if self.versus == self.answer:
                raise UsageError("--versus is the answer itself: give a different answer")
        if self.corrupt is not None:
            check_text(self.corrupt, "corrupted text")

    @property
    def item(self) -> tuple[str, str | None, str | None]:
        """(text, target, pair): what is encoded."""
        return self.text, self.target, self.pair


def check_text(text: object, what: str = "text") -> None:
    """An empty or blank text is a usage error, checked before any model runs."""
    if not isinstance(text, str):
        raise UsageError(f"the {what} is a str, not {type(text).__name__}")
    if not text or not text.strip():
        raise UsageError(f"the {what} is empty: give some words to look at")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        # Python keeps a command line's bytes that are not UTF-8 as U+DC80..U+DCFF.
        code = ord(text[error.start])
        what_is_there = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a surrogate"
        raise UsageError(
            f"the {what} is not UTF-8 text: {what_is_there} at offset {error.start}"
        ) from None


def check_answer(answer: object, what: str = "answer") -> str:
    """An answer as given, if it is a text with something in it."""
    if not isinstance(answer, str):
        raise UsageError(f"the {what} is a text, not {type(answer).__name__}")
    if not answer.strip():
        raise UsageError(f"the {what} is empty: give the words the model should go on with")
    return answer


def check_batch(inputs: object, batch_size: int, method: str, single: str) -> None:
    """A list of inputs and a batch size that counts, as a method reading many takes them."""
    if isinstance(inputs, str | bytes):
        raise UsageError(f"{method} reads a list of texts; for one text use {single}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size is a whole number of at least 1, not {batch_size!r}")


def as_input(item: Item | Input, answer: str | None = None) -> Input:
    """An input as given, or made of a text or a (text, target, pair) tuple and the
    ``answer`` it carries: checked."""
    if isinstance(item, Input):
        return item
    if isinstance(item, str):
        return Input(item, answer=answer)
    if not isinstance(item, tuple | list) or not 1 <= len(item) <= 3:
        raise UsageError(
            f"an input is a text, or a tuple (text, target) or (text, target, pair); not {item!r}"
        )
    text, target, pair = (*item, None, None)[:3]
    return Input(text, target, pair, answer)


def without_pair(item: Input) -> tuple[str, str | None]:
    """(text, target) of a checked input, for models that read no sentence pairs."""
    if item.pair is not None:
        raise UsageError("sentence pairs (--pair) are read by pretrained encoders such as BERT")
    return item.text, item.target


@dataclass(frozen=True)
class Explaining:
    """What ``explain`` asks: one head's attention over ``text`` step by step (the built-in
    stack) or one ``query`` row of it from its dot products (a pretrained model, tokens
    labelled with the tokenizer's own pieces when ``raw_pieces``)."""

    text: str
    target: str | None = None
    mode: Mode | None = None
    layer: int | str = 0
    head: int | str = 0
    query: int | None = None
    raw_pieces: bool = False
