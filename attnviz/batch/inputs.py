"""A batch's inputs: a line of text or a JSONL object each, named for their files (from
their position in the whole input, so that shards never clash) and split into shards."""

from __future__ import annotations

import itertools
import json
import re
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnviz.atomic_files import STDIO
from attnviz.errors import AttnvizError, UsageError
from attnviz.inputs import bounded_lines, refuse_device, stdin_bytes

_SLUG_LENGTH = 40


@dataclass
class BatchInput:
    index: int  # position among all inputs, counted from 0; the same in every shard
    line: int  # line number in the input file
    text: str | None = None
    target: str | None = None
    id: str | None = None
    pair: str | None = None  # sentence B of a sentence pair (JSONL "pair")
    answer: str | None = None  # what a causal language model should go on with (JSONL "answer")
    versus: str | None = None  # a second answer (JSONL "versus"): circuits' logit difference
    corrupt: str | None = None  # the text's corrupted twin (JSONL "corrupt"): circuits' pairs
    spans: object = None  # a circuit's pair's own spans (JSONL "spans"), read as circuits read them
    error: str | None = None  # why this line could not be read as an input
    blank: bool = False  # a blank line: skipped, not an input that failed
    name: str = ""  # the stem of its output files

    @property
    def item(self) -> tuple[str, str | None, str | None]:
        """(text, target, pair): what the model reads of an input that was read."""
        if self.text is None:
            raise ValueError(f"line {self.line} holds no input: {self.error}")
        return self.text, self.target, self.pair


def slug(text: str) -> str:
    """Lowercase ASCII letters, digits and dashes; accents folded; at most 40 characters."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    cleaned = re.sub(r"[^a-z0-9]+", "-", folded.lower()).strip("-")
    return cleaned[:_SLUG_LENGTH].rstrip("-")


def _open_lines(source: str) -> Iterator[bytes]:
    """The lines of a file or stdin, one at a time, without their line ends; a leading
    UTF-8 byte-order mark is not text."""
    if source == STDIO:
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("INPUT is '-' but standard input is a terminal: pipe the inputs in")
        stream = stdin_bytes()
    else:
        path = Path(source)
        if path.is_dir():
            raise UsageError(f"{source} is a directory: give a text or JSONL file")
        try:
            refuse_device(path.stat(), source)
            stream = path.open("rb")
        except FileNotFoundError:
            raise UsageError(f"no such input file: {source}") from None
        except OSError as error:
            raise AttnvizError(f"cannot read {source}: {error.strerror}") from None
    return _lines_of(stream, close=source != STDIO)


def _lines_of(stream: Any, close: bool) -> Iterator[bytes]:
    try:
        for number, line in enumerate(bounded_lines(stream, "the input")):
            line = line.removesuffix(b"\n").removesuffix(b"\r")
            yield line.removeprefix(b"\xef\xbb\xbf") if number == 0 else line
    except OSError as error:
        raise AttnvizError(f"cannot read the input: {error.strerror}") from None
    finally:
        if close:
            stream.close()


def read_inputs(source: str) -> list[BatchInput]:
    """Every input of a file or stdin; see :func:`iter_inputs`."""
    return list(iter_inputs(source))


def iter_inputs(source: str) -> Iterator[BatchInput]:
    """Inputs from a text file (a line each), a JSONL file (``text``, ``target``, ``id``) or
    stdin, read one line at a time.

    JSONL is recognised by a ``.jsonl`` or ``.ndjson`` suffix, or by a first
    non-blank line that starts with ``{``. A line that cannot be read becomes
    an input with an error, so the batch records it and goes on; a blank line
    is marked ``blank``, to be skipped.
    """
    lines = _open_lines(source)
    leading: list[bytes] = []  # the blank lines before the first that says what the file is
    first = b""
    for line in lines:
        leading.append(line)
        if line.strip():
            first = line.strip()
            break
    jsonl = Path(source).suffix.lower() in (".jsonl", ".ndjson") or first.startswith(b"{")
    for index, data in enumerate(itertools.chain(leading, lines)):
        item = BatchInput(index=index, line=index + 1)
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError as error:
            item.error = (
                f"line {item.line} is not UTF-8 text: byte 0x{data[error.start]:02x} at offset "
                f"{error.start}"
            )
            yield item
            continue
        if jsonl:
            _read_json_line(item, content)
        else:
            item.text = content
        if item.error is None and (item.text is None or not item.text.strip()):
            if content.strip():
                item.error = f"line {item.line} has an empty text"
            else:
                item.blank = True
        yield item


def _read_json_line(item: BatchInput, content: str) -> None:
    if not content.strip():
        return  # a blank line
    try:
        value = json.loads(content)
    except json.JSONDecodeError as error:
        item.error = f"line {item.line} is not valid JSON ({error.msg})"
        return
    except RecursionError:  # deeper than Python reads: no input is nested at all
        item.error = f"line {item.line} nests its JSON too deep to be an input"
        return
    except ValueError:  # a whole number of more digits than Python reads
        item.error = f"line {item.line} holds a number too long to read"
        return
    if not isinstance(value, dict):
        item.error = f"line {item.line} is not a JSON object"
        return
    text, target, name = value.get("text"), value.get("target"), value.get("id")
    pair, answer = value.get("pair"), value.get("answer")
    versus, corrupt = value.get("versus"), value.get("corrupt")
    if not isinstance(text, str):
        item.error = f'line {item.line} has no "text" string'
        return
    named = {"target": target, "pair": pair, "answer": answer, "versus": versus, "corrupt": corrupt}
    for field_name, part in named.items():
        if part is not None and not isinstance(part, str):
            item.error = f'line {item.line}: "{field_name}" must be a string'
            return
    if answer is not None and not answer.strip():
        item.error = f'line {item.line}: "answer" is empty'
        return
    parts = (text, *named.values(), name)
    if not all(_is_text(part) for part in parts if isinstance(part, str)):
        item.error = f"line {item.line} holds a lone surrogate (a \\ud800-style escape): not text"
        return
    item.text, item.target, item.pair, item.answer = text, target, pair, answer
    item.versus, item.corrupt, item.spans = versus, corrupt, value.get("spans")
    item.id = None if name is None else str(name)


def _is_text(value: str) -> bool:
    """JSON can spell half of a UTF-16 pair (\\ud800), which no UTF-8 file can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def assign_names(inputs: Sequence[BatchInput]) -> None:
    """Give every input a distinct file stem: its id, or its index and a slug of its text.

    Names are fixed over the whole input, before sharding; two inputs that
    would share a name keep both, the later one with ``-2``, ``-3``… added.
    """
    taken: set[str] = set()
    for item in inputs:
        if item.id is not None:
            base = slug(item.id) or f"{item.index:04d}"
        else:
            base = "-".join(part for part in (f"{item.index:04d}", slug(item.text or "")) if part)
        name, count = base, 1
        while name in taken:
            count += 1
            name = f"{base}-{count}"
        taken.add(name)
        item.name = name


def parse_shard(spec: str) -> tuple[int, int]:
    """``K/N`` -> (K, N), 1 <= K <= N."""
    match = re.fullmatch(r"(\d+)/(\d+)", spec.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(f"--shard {spec!r} is not K/N with 1 <= K <= N, e.g. 2/4")
    return int(match[1]), int(match[2])


def in_shard(inputs: Sequence[BatchInput], shard: tuple[int, int] | None) -> list[BatchInput]:
    """The K-th of N interleaved slices: input i belongs to shard (i mod N) + 1."""
    if shard is None:
        return list(inputs)
    number, count = shard
    return [item for item in inputs if item.index % count == number - 1]
