"""A batch's manifests: a record per input (its files, each with its size and digest, or
its error), appended as each input ends and read back by ``--resume``, which trusts a
file only at its recorded size and digest; before a file is written, a claim of its
name, so that the folder's runs remove only files a run of theirs made."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnviz.atomic_files import file_blake2b, open_output
from attnviz.batch.inputs import BatchInput
from attnviz.data_formats import dump_json
from attnviz.errors import AttnvizError
from attnviz.outputs import BATCH

MANIFEST = "manifest.jsonl"


@dataclass
class Record:
    """A manifest line."""

    index: int
    line: int
    id: str | None
    text: str | None
    target: str | None
    status: str  # "ok" or "failed"
    pair: str | None = None
    files: list[str] = field(default_factory=list)
    error: str | None = None
    # What produced the files: model, mode, selection, formats and every option that
    # changes them. --resume redoes an input whose request differs from today's.
    request: dict[str, Any] | None = None
    # Each file's size and digest when written: --resume trusts a file only if both
    # still hold (a record without them, from an older release, is redone).
    digests: dict[str, FileDigest] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The manifest line's fields; shallow (``dataclasses.asdict`` deep-copies the request
        for every input, a fifth of a small batch's bookkeeping)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def manifest_name(shard: tuple[int, int] | None) -> str:
    return MANIFEST if shard is None else f"manifest-{shard[0]}-of-{shard[1]}.jsonl"


_MANIFEST_NAME = re.compile(r"manifest(?:-([1-9][0-9]*)-of-([1-9][0-9]*))?\.jsonl")


def folder_manifests(folder: Path) -> dict[str, tuple[int, int] | None]:
    """The manifests in a folder by name, each with the slice it records (None: all)."""
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):  # not made yet: nothing there
        return {}
    except OSError as error:
        raise AttnvizError(f"cannot read the folder {folder}: {error.strerror}") from None
    found: dict[str, tuple[int, int] | None] = {}
    for name in names:
        if match := _MANIFEST_NAME.fullmatch(name):
            found[name] = None if match[1] is None else (int(match[1]), int(match[2]))
    return found


@dataclass
class Contents:
    """What a manifest holds: its records (the last word on each input), the requests
    its runs claimed (:func:`claim`), the files they claimed before writing them
    (:class:`Ledger`), and every digest a record or a claim gives a name: what a file of
    that name held when a run wrote it."""

    records: dict[int, Record] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    claimed: set[str] = field(default_factory=set)
    digests: dict[str, list[FileDigest]] = field(default_factory=dict)

    @property
    def recorded(self) -> set[str]:
        return {name for record in self.records.values() for name in record.files}

    def add_digests(self, digests: object) -> None:
        """A line's digests, by name: one each, or a list (a compacted claim's)."""
        if not isinstance(digests, dict):
            return
        for name, given in digests.items():
            found = given if isinstance(given, list) else [given]
            if _is_output_name(name):
                self.digests.setdefault(name, []).extend(d for d in found if isinstance(d, dict))

    def merged(self, other: Contents) -> Contents:
        """Both manifests' claims and digests (what the folder's runs made)."""
        both = Contents(claimed=self.claimed | other.claimed)
        for digests in (self.digests, other.digests):
            for name, found in digests.items():
                both.digests.setdefault(name, []).extend(found)
        return both


def read_contents(path: Path) -> Contents:
    """A manifest's lines, read once. A line that does not parse or is none of a record,
    a request's claim or a files' claim (a run stopped mid-line, a hand-edited file)
    means "not done"; a manifest that is a link is not read."""
    contents = Contents()
    if path.is_symlink() or not path.is_file():
        return contents
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        record = _parse_record(line)
        if record is not None:
            contents.records[record.index] = record
            if record.request is not None:
                contents.requests.append(record.request)
            contents.add_digests(record.digests)
            continue
        value = _parse_object(line)
        if list(value) == ["request"] and isinstance(value["request"], dict):
            contents.requests.append(value["request"])
        elif _is_claim_object(value):
            contents.claimed.update(name for name in value[CLAIM] if _is_output_name(name))
            contents.add_digests(value.get(DIGESTS))
    return contents


def read_manifest(path: Path) -> dict[int, Record]:
    """The records of an earlier run, the last word on each input."""
    return read_contents(path).records


def claim(manifest: Path, request: dict[str, Any], *, anew: bool = False) -> None:
    """``request`` written into a run's manifest before any input is: a shard started beside
    it with other options reads it there and is refused, though neither has finished an
    input yet. A manifest that records no input (or ``anew``) is begun anew with it; one
    that does (``--resume``, ``--overwrite`` before it removes the files) gets one more
    line. Readers of records pass over it."""
    line = dump_json({"request": request})
    if not anew and read_manifest(manifest):
        append_line(manifest, line)
    else:
        with open_output(manifest, follow_links=False) as out:
            out.write(line)


# A files' claim line: {"claim": [names]} before the files are made, and
# {"claim": [names], "digests": {name: digest}} once they are whole, before they take
# their names.
CLAIM, DIGESTS = "claim", "digests"
# What a batch writes: a claim naming anything else (a manifest, the lock, a name no
# output takes) is no claim, whoever wrote it into the manifest.
_OUTPUT_SUFFIXES = tuple(f".{output.value}" for output in BATCH)


def _is_claim_object(value: dict[str, Any]) -> bool:
    return CLAIM in value and set(value) <= {CLAIM, DIGESTS} and isinstance(value[CLAIM], list)


def is_claim(line: str) -> bool:
    """Whether a manifest line is a files' claim."""
    return _is_claim_object(_parse_object(line))


def append_line(path: Path, line: str) -> None:
    """``line`` added at the end of ``path`` in one write(2): writers in several processes
    (the run, its render workers) add lines to one manifest, never into each other's.
    A link there is replaced, never followed out of the folder."""
    if path.is_symlink():
        path.unlink()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o666)
    try:
        data = line.encode("utf-8")
        written = os.write(descriptor, data)
        while written < len(data):  # a regular file takes it whole; a full disk may not
            written += os.write(descriptor, data[written:])
    finally:
        os.close(descriptor)


def _parse_object(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _parse_record(line: str) -> Record | None:
    try:
        value = json.loads(line)
        record = Record(**value)
    except (ValueError, TypeError, RecursionError):  # not a record this attnviz wrote
        return None
    well_formed = (
        type(record.index) is int
        and isinstance(record.files, list)
        and all(_is_plain_name(name) for name in record.files)
        and record.status in ("ok", "failed")
        and (record.request is None or isinstance(record.request, dict))
    )
    return record if well_formed else None


def _is_plain_name(name: object) -> bool:
    """A file name inside the folder: no folder part, no way out."""
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name


def _is_output_name(name: object) -> bool:
    """A name a batch's output may take: plain, a batch format's suffix, not hidden (the
    lock, a temporary file)."""
    return (
        _is_plain_name(name)
        and isinstance(name, str)
        and name.endswith(_OUTPUT_SUFFIXES)
        and not name.startswith(".")
    )


def is_complete(record: Record | None, item: BatchInput, folder: Path, request: dict) -> bool:
    """Done earlier, for the same text and the same request, with every file still there
    and whole: as long as it was written, with the same digest."""
    return bool(
        record
        and record.status == "ok"
        and (record.text, record.target, record.pair) == (item.text, item.target, item.pair)
        and record.request == request
        and isinstance(record.digests, dict)
        and all(is_whole(folder / name, record.digests.get(name)) for name in record.files)
    )


FileDigest = dict[str, Any]  # {"size": bytes, "blake2b": hex}; JSON in the manifest
_DIGEST_SIZE = 16  # bytes: enough to tell a damaged file, short in the manifest


def digest_of(path: Path) -> FileDigest:
    """A file's size and digest as it lies in the folder, read back once written."""
    return {"size": path.lstat().st_size, "blake2b": file_blake2b(path, _DIGEST_SIZE)}


def is_whole(path: Path, expected: object) -> bool:
    if not isinstance(expected, dict):
        return False
    try:
        status = path.lstat()
        if not stat.S_ISREG(status.st_mode) or status.st_size != expected.get("size"):
            return False
        return file_blake2b(path, _DIGEST_SIZE) == expected.get("blake2b")
    except OSError:
        return False
