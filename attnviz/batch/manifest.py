"""A batch's manifests: a record per input (its files, each with its size and digest, or
its error), appended as each input ends and read back by ``--resume``, which trusts a
file only at its recorded size and digest."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnviz.batch.inputs import BatchInput
from attnviz.codecs import dump_json
from attnviz.errors import AttnvizError
from attnviz.files import file_blake2b, open_output

MANIFEST = "manifest.jsonl"

if TYPE_CHECKING:
    from attnviz.batch.folder import FolderPlan


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


def read_manifest(path: Path) -> dict[int, Record]:
    """The records of an earlier run, the last word on each input. A line that does not
    parse or does not hold a record (a run stopped mid-line, a hand-edited file) means
    "not done"; a manifest that is a link is not read."""
    records: dict[int, Record] = {}
    if path.is_symlink() or not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        record = _parse_record(line)
        if record is not None:
            records[record.index] = record
    return records


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


def is_complete(record: Record | None, item: BatchInput, folder: Path, request: dict) -> bool:
    """Done earlier, for the same text and the same request, with every file still there
    and whole: as long as it was written, with the same digest."""
    return bool(
        record
        and record.status == "ok"
        and (record.text, record.target, record.pair) == (item.text, item.target, item.pair)
        and record.request == request
        and isinstance(record.digests, dict)
        and all(_is_whole(folder / name, record.digests.get(name)) for name in record.files)
    )


FileDigest = dict[str, Any]  # {"size": bytes, "blake2b": hex}; JSON in the manifest
_DIGEST_SIZE = 16  # bytes: enough to tell a damaged file, short in the manifest


def digest_of(path: Path) -> FileDigest:
    """A file's size and digest as it lies in the folder, read back once written."""
    return {"size": path.lstat().st_size, "blake2b": file_blake2b(path, _DIGEST_SIZE)}


def _is_whole(path: Path, expected: object) -> bool:
    if not isinstance(expected, dict):
        return False
    try:
        status = path.lstat()
        if not stat.S_ISREG(status.st_mode) or status.st_size != expected.get("size"):
            return False
        return file_blake2b(path, _DIGEST_SIZE) == expected.get("blake2b")
    except OSError:
        return False


class Manifest:
    """Appends a record per finished input, each line flushed whole; at the end, compacts
    and removes the manifests whose records it took over."""

    def __init__(self, plan: FolderPlan, request: dict) -> None:
        self.path = plan.manifest
        self.absorbed = plan.absorbed
        self.records = dict(plan.earlier)
        self.request = request  # stamped on every record this run adds
        if self.path.is_symlink():  # a link is replaced, never followed out of the folder
            self.path.unlink()
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if plan.append else os.O_TRUNC)
        descriptor = os.open(self.path, flags | os.O_NOFOLLOW, 0o666)
        self.handle = os.fdopen(descriptor, "a" if plan.append else "w", encoding="utf-8")

    def add(self, record: Record) -> None:
        self.records[record.index] = record
        self.handle.write(dump_json(record.to_dict()))
        self.handle.flush()

    def close(self, finished: bool) -> None:
        self.handle.close()
        if finished:  # one line per input, in input order, written whole
            lines = (dump_json(self.records[index].to_dict()) for index in sorted(self.records))
            with open_output(self.path, follow_links=False) as out:
                out.writelines(lines)
            for manifest in self.absorbed:
                manifest.unlink(missing_ok=True)
