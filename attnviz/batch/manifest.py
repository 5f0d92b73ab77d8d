"""A batch's manifests: a record per input (its files, each with its size and digest, or
its error), appended as each input ends and read back by ``--resume``, which trusts a
file only at its recorded size and digest; before a file is written, a claim of its
name, so that the folder's runs remove only files a run of theirs made."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attnviz.atomic_files import file_blake2b, open_output
from attnviz.batch.inputs import BatchInput
from attnviz.data_formats import dump_json
from attnviz.errors import AttnvizError, warn
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
            contents.claimed.update(name for name in value[_CLAIM] if _is_output_name(name))
            contents.add_digests(value.get(_DIGESTS))
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
_CLAIM, _DIGESTS = "claim", "digests"
# What a batch writes: a claim naming anything else (a manifest, the lock, a name no
# output takes) is no claim, whoever wrote it into the manifest.
_OUTPUT_SUFFIXES = tuple(f".{output.value}" for output in BATCH)


@dataclass(frozen=True)
class Ledger:
    """How a run's writers account for the files they make in its folder: each name is
    claimed in the run's manifest before anything is made there, then held by an empty
    placeholder made only if the name is free (``O_EXCL``: a file that appeared since
    the run began is never written over), and its file's digest claimed once the file
    is whole, before it takes the name. A run killed at any point leaves claims that
    the next run settles (removing only an empty placeholder or a file whose content
    is a claimed digest), never an orphan nobody may remove. Runs in any process that
    writes the files (render workers, Ray workers)."""

    manifest: Path  # this run's
    # Names the folder's manifests claim or record: a batch's own, which a run may write
    # over (an input redone); any other name is written only where it is free.
    ours: frozenset[str] = frozenset()

    def claim(self, name: str) -> None:
        """``name`` claimed for a file this run is about to write; refused (the input
        fails) where a file no batch made holds it, or appears there meanwhile."""
        path = self.manifest.parent / name
        if name in self.ours or self._made_here(path):
            append_line(self.manifest, dump_json({_CLAIM: [name]}))
            return
        if os.path.lexists(path):
            raise self._taken(path)
        append_line(self.manifest, dump_json({_CLAIM: [name]}))
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
        except FileExistsError:  # it appeared between the look and the claim
            raise self._taken(path) from None

    def _made_here(self, path: Path) -> bool:
        """A file this run began and a writer of its left (a Ray worker stopped after
        claiming the name: its input is retried elsewhere), as its manifest tells it:
        the placeholder, or a whole file whose digest it claimed."""
        return os.path.lexists(path) and _made_by_a_run(
            path, path.name, read_contents(self.manifest)
        )

    def written(self, name: str, digest: FileDigest) -> None:
        """The whole file's digest claimed, before it takes ``name``."""
        append_line(self.manifest, dump_json({_CLAIM: [name], _DIGESTS: {name: digest}}))

    @staticmethod
    def _taken(path: Path) -> AttnvizError:
        return AttnvizError(
            f"{path} is there already and no batch made it: it is left as it is (move it "
            "away, or write into another folder)"
        )


def _is_claim_object(value: dict[str, Any]) -> bool:
    return _CLAIM in value and set(value) <= {_CLAIM, _DIGESTS} and isinstance(value[_CLAIM], list)


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


def remove_made(folder: Path, names: Iterable[str], known: Contents) -> list[str]:
    """The files of these names in ``folder`` that a run made removed, as ``known`` (the
    folder's manifests) tells them: a link at a name they claim or record (never its
    target), an empty placeholder at a claimed name, a file whose content is a digest
    given for its name. Returns the names kept: files whose content no run wrote (the
    user's, or one a forged claim names), for the caller to say."""
    kept = []
    for name in names:
        path = folder / name
        if path.is_symlink() or _made_by_a_run(path, name, known):
            path.unlink(missing_ok=True)
        elif path.is_file():
            kept.append(name)
    return kept


def _made_by_a_run(path: Path, name: str, known: Contents) -> bool:
    try:
        status = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(status.st_mode):
        return False
    if status.st_size == 0:
        return name in known.claimed  # a placeholder: a run stopped before the file was whole
    sized = [d for d in known.digests.get(name, []) if d.get("size") == status.st_size]
    return bool(sized) and any(_is_whole(path, digest) for digest in sized)


def say_kept(folder: Path, kept: list[str]) -> None:
    """One line for the claimed files kept because no run wrote what they hold."""
    if kept:
        more = f" and {len(kept) - 1} more" if len(kept) > 1 else ""
        warn(
            f"{folder / kept[0]}{more}: a manifest claims it, but its content is not what a "
            "batch wrote: it is left as it is"
        )


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
    """Appends a record per finished input, each line written whole; at the end, compacts
    and removes the manifests whose records it took over."""

    def __init__(
        self,
        path: Path,
        request: dict,
        earlier: dict[int, Record] | None = None,
        absorbed: tuple[Path, ...] = (),
    ) -> None:
        self.path = path  # claimed already (:func:`claim`): lines go on after it
        self.absorbed = absorbed  # earlier manifests whose records it takes over
        self.records = dict(earlier or {})  # what --resume skipped, kept
        self.request = request  # stamped on every record this run adds

    def add(self, record: Record) -> None:
        """``record`` written, replacing an earlier run's record of its input: where the input
        failed this time, its earlier files stay recorded (``--overwrite`` still removes
        them); where it was written anew, those of its earlier files it no longer has go."""
        earlier = self.records.get(record.index)
        stale: dict[str, FileDigest | None] = {}  # earlier files it no longer gets, digests
        if earlier is not None and record.status == "failed":
            record = replace(record, files=earlier.files, digests=earlier.digests)
        elif earlier is not None:
            written = earlier.digests or {}
            stale = {name: written.get(name) for name in earlier.files if name not in record.files}
        known = Contents()
        if stale:  # still the folder's own once the new record hides the old one
            known.add_digests(stale)
            append_line(self.path, dump_json({_CLAIM: list(stale), _DIGESTS: stale}))
        self.records[record.index] = record
        append_line(self.path, dump_json(record.to_dict()))
        say_kept(self.path.parent, remove_made(self.path.parent, stale, known))

    def close(self, finished: bool) -> None:
        """A finished run's manifest rewritten whole: one line per input, in input order,
        and one claim of the files claimed but not recorded (an input that failed after
        writing some), which :func:`~attnviz.batch.folder.remove_left_behind` settles."""
        if not finished:
            return
        known = Contents()
        for path in (self.path, *self.absorbed):
            known = known.merged(read_contents(path))
        recorded = {name for record in self.records.values() for name in record.files}
        lines = [dump_json(self.records[index].to_dict()) for index in sorted(self.records)]
        if unsettled := sorted(known.claimed - recorded):
            digests = {name: known.digests[name] for name in unsettled if name in known.digests}
            lines.append(dump_json({_CLAIM: unsettled, _DIGESTS: digests}))
        with open_output(self.path, follow_links=False) as out:
            out.writelines(lines)
        for manifest in self.absorbed:
            manifest.unlink(missing_ok=True)
