"""Batches: many inputs in, a folder of pictures and data and a manifest out.

Every input gets a deterministic, filesystem-safe name from its position in
the whole input (so that shards never clash) and its text or id. Every file is
written under a temporary name and renamed into place, so an interrupted run
leaves only complete files; ``manifest.jsonl`` records each input with its
files (each with its size and digest) and status, and ``resume`` skips the
inputs it records as done whose files are all there and whole. A folder has one
writer at a time (:class:`FolderLock`), and every run honours every manifest in
it (:func:`plan_folder`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import json
import os
import re
import stat
import sys
import time
import unicodedata
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnviz import signals
from attnviz.analysis.heads import TopHeads
from attnviz.choices import Aggregate, Dtype, Output, View
from attnviz.codecs import dump_json
from attnviz.errors import AttnvizError, ExitCode, UsageError, describe, warn
from attnviz.extractor import Checked
from attnviz.files import STDIO, file_blake2b, open_output, remove_if_abandoned, temporaries
from attnviz.maps import AttentionMaps
from attnviz.render.image import Painter
from attnviz.render.style import Style
from attnviz.writers import Rendering, pieces

MANIFEST = "manifest.jsonl"
_SLUG_LENGTH = 40


class PartialFailure(AttnvizError):
    """Some inputs of a batch failed; the rest were written."""

    exit_code = ExitCode.PARTIAL_FAILURE


@dataclass
class Tally:
    """What a batch did, kept up to date as it goes, so that it is right after an abort."""

    skipped: int = 0  # done by an earlier run, for the same request
    records: list[Record] = field(default_factory=list)  # finished by this run

    @property
    def failed(self) -> int:
        return sum(record.status == "failed" for record in self.records)


@dataclass
class BatchInput:
    index: int  # position among all inputs, counted from 0; the same in every shard
    line: int  # line number in the input file
    text: str | None = None
    target: str | None = None
    id: str | None = None
    pair: str | None = None  # sentence B of a sentence pair (JSONL "pair")
    error: str | None = None  # why this line could not be read as an input
    blank: bool = False  # a blank line: skipped, not an input that failed
    name: str = ""  # the stem of its output files

    @property
    def item(self) -> Checked:
        """(text, target, pair): what the model reads of an input that was read."""
        if self.text is None:
            raise ValueError(f"line {self.line} holds no input: {self.error}")
        return self.text, self.target, self.pair


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
        stream = sys.stdin.buffer
    else:
        path = Path(source)
        if path.is_dir():
            raise UsageError(f"{source} is a directory: give a text or JSONL file")
        try:
            stream = path.open("rb")
        except FileNotFoundError:
            raise UsageError(f"no such input file: {source}") from None
        except OSError as error:
            raise AttnvizError(f"cannot read {source}: {error.strerror}") from None
    return _lines_of(stream, close=source != STDIO)


def _lines_of(stream: Any, close: bool) -> Iterator[bytes]:
    try:
        for number, line in enumerate(stream):
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
    if not isinstance(value, dict):
        item.error = f"line {item.line} is not a JSON object"
        return
    text, target, name = value.get("text"), value.get("target"), value.get("id")
    pair = value.get("pair")
    if not isinstance(text, str):
        item.error = f'line {item.line} has no "text" string'
        return
    for field_name, part in (("target", target), ("pair", pair)):
        if part is not None and not isinstance(part, str):
            item.error = f'line {item.line}: "{field_name}" must be a string'
            return
    if not all(_is_text(part) for part in (text, target, pair, name) if isinstance(part, str)):
        item.error = f"line {item.line} holds a lone surrogate (a \\ud800-style escape): not text"
        return
    item.text, item.target, item.pair = text, target, pair
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


@dataclass(frozen=True)
class FolderPlan:
    """How a run honours the manifests already in its folder."""

    manifest: Path  # this run's
    earlier: dict[int, Record] = field(default_factory=dict)  # what --resume may skip
    append: bool = False  # --resume: this run's manifest goes on
    absorbed: tuple[Path, ...] = ()  # their records are taken over; removed at the end
    replaced: tuple[Path, ...] = ()  # --overwrite: removed first, with the files they record


def plan_folder(
    folder: Path,
    shard: tuple[int, int] | None,
    *,
    resume: bool,
    overwrite: bool,
    request: dict[str, Any],
) -> FolderPlan:
    """What this run may do in ``folder``, given every manifest there; refuses (one line,
    exit 2) a run that would mix its files with another batch's.

    A whole batch's files may be any input's, so it honours every manifest: --resume
    takes their records over (finishing a sharded batch as one), --overwrite removes
    them and their files. A shard's files are its slice's: the other slices of the
    same N are its siblings, left alone but held to the same request; a whole batch
    or another N covers its files, as its own manifest does.
    """
    own = manifest_name(shard)
    found = folder_manifests(folder)
    siblings = [
        name
        for name, piece in found.items()
        if name != own and shard is not None and piece is not None and piece[1] == shard[1]
    ]
    held = [name for name in found if name not in siblings]  # this run's files among theirs
    for sibling in siblings:
        if any(record.request != request for record in read_manifest(folder / sibling).values()):
            raise UsageError(
                f"{folder} holds {sibling}, written with other options: every shard of a "
                "batch takes the same ones (to change them, run the whole batch again "
                "without --shard, with --overwrite)"
            )
    plan = FolderPlan(manifest=folder / own)
    if overwrite:
        return dataclasses.replace(plan, replaced=tuple(folder / name for name in held))
    if not resume:
        if held:
            raise UsageError(
                f"{folder} already holds a batch ({', '.join(held)}): add --resume to finish "
                "it, or --overwrite to start again"
            )
        return plan
    others = [name for name in held if name != own]
    if shard is not None and others:
        raise UsageError(
            f"--shard {shard[0]}/{shard[1]} --resume: {folder} holds {others[0]}, another "
            "slicing of the inputs: resume it as it was run, or add --overwrite to start again"
        )
    earlier: dict[int, Record] = {}
    for name in [*others, own]:  # this run's own manifest has the last word
        earlier.update(read_manifest(folder / name))
    return dataclasses.replace(
        plan, earlier=earlier, append=True, absorbed=tuple(folder / name for name in others)
    )


def remove_replaced(plan: FolderPlan) -> None:
    """--overwrite: the earlier batches' files and manifests go, so that none is left
    beside the new ones (only the names their manifests record: nothing else is touched)."""
    for manifest in plan.replaced:
        for record in read_manifest(manifest).values():
            for name in record.files:
                path = manifest.parent / name
                if path.is_symlink() or path.is_file():
                    path.unlink(missing_ok=True)
        manifest.unlink(missing_ok=True)


class FolderLock:
    """One writer per folder: a whole batch holds it alone; the shards of a batch share
    it, each slice alone. POSIX record locks on a lock file in the folder: the system
    drops them when a process ends however it ends, and they hold on network file
    systems too. The last writer out removes the file."""

    NAME = ".attnviz-batch.lock"

    def __init__(self, folder: Path, shard: tuple[int, int] | None) -> None:
        self.folder = folder
        self.shard = shard
        self.path = folder / self.NAME
        self.descriptor: int | None = None

    def __enter__(self) -> FolderLock:
        try:
            import fcntl
        except ImportError:  # no POSIX locks (Windows): one writer per folder is up to you
            return self
        while self.descriptor is None:
            try:
                descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
            except OSError as error:
                raise AttnvizError(f"cannot lock {self.folder}: {error.strerror}") from None
            try:
                self._lock(fcntl, descriptor)
            except BaseException:
                os.close(descriptor)
                raise
            if _same_file(descriptor, self.path):
                self.descriptor = descriptor
            else:  # locked as the last writer removed it: lock the new one
                os.close(descriptor)
        return self

    def _lock(self, fcntl: Any, descriptor: int) -> None:
        # Byte 0 is the folder, shared by the shards; byte 1 + n is the n-th slice
        # counted over every K/N, 1/1, 1/2, 2/2, 1/3...
        try:
            if self.shard is None:
                fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # every byte
                return
            fcntl.lockf(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
        except OSError as error:
            raise self._busy(error, "a batch") from None
        number, count = self.shard
        try:
            fcntl.lockf(
                descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, count * (count - 1) // 2 + number
            )
        except OSError as error:
            raise self._busy(error, f"shard {number}/{count}") from None

    def _busy(self, error: OSError, what: str) -> AttnvizError:
        if error.errno not in (errno.EAGAIN, errno.EACCES):
            return AttnvizError(f"cannot lock {self.folder}: {error.strerror}")
        return AttnvizError(
            f"another attnviz run is writing {what} into {self.folder}: wait until it ends, "
            "or write elsewhere"
        )

    def __exit__(self, *exc: object) -> None:
        if self.descriptor is None:
            return
        import fcntl

        with contextlib.suppress(OSError):  # held by another writer still: it stays
            fcntl.lockf(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.path.unlink()
        os.close(self.descriptor)
        self.descriptor = None


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        named = path.lstat()
    except OSError:
        return False
    held = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


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
    except (json.JSONDecodeError, TypeError):
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


@dataclass(frozen=True)
class Outputs:
    """What to write for every input."""

    folder: Path
    formats: tuple[Output, ...]  # some of png, svg, pdf, json, npz, html
    view: View
    style: Style
    aggregate: Aggregate | None = None  # applied before writing
    top: TopHeads | None = None  # the heads pictures show, chosen per input
    label_positions: bool = False  # repeated labels in pictures told apart
    dtype: Dtype = Dtype.FLOAT32  # how json and npz store the weights
    request: dict[str, Any] = field(default_factory=dict)  # the model side, for the manifest

    def fingerprint(self) -> dict[str, Any]:
        """Everything that decides the files an input gets, as plain JSON values: as the
        manifest reads them back (a tuple is a list there)."""
        fingerprint = {
            **self.request,
            "formats": [output_format.value for output_format in self.formats],
            "view": self.view.value,
            "style": asdict(self.style),
            "aggregate": None if self.aggregate is None else self.aggregate.value,
            "top": None if self.top is None else asdict(self.top),
            "label_positions": self.label_positions,
            "dtype": self.dtype.value,
        }
        return json.loads(json.dumps(fingerprint))


def write_outputs(
    maps: AttentionMaps, stem: str, outputs: Outputs, painter: Painter
) -> dict[str, FileDigest]:
    """Write every requested file of one input; return their names and digests. Runs in
    worker processes."""
    if outputs.aggregate is not None:
        from attnviz.analysis.aggregate import aggregate

        maps = aggregate(maps, outputs.aggregate)
    how = Rendering(
        outputs.view,
        outputs.style,
        outputs.top,
        outputs.label_positions,
        outputs.dtype,
        painter=painter,
    )
    written = {}
    for output_format in outputs.formats:
        # suffix: "", -L{layer}, -H{head} or -L{layer}-H{head}
        for suffix, write_file in pieces(maps, output_format, how):
            name = f"{stem}{suffix}.{output_format.value}"
            with open_output(outputs.folder / name, binary=True, follow_links=False) as out:
                write_file(out)
            written[name] = digest_of(outputs.folder / name)
    return written


def remove_left_behind(
    folder: Path, shard: tuple[int, int] | None, inputs: Sequence[BatchInput], outputs: Outputs
) -> None:
    """After the engine's session, however it ended: the temporary files of these inputs'
    outputs that nobody will finish removed (Ray stops a worker mid-write when its driver
    ends on Ctrl-C or SIGTERM; a run killed with kill -9 leaves its own), waiting a few
    seconds for those still at work. Skipped if another run holds the folder by then."""
    if not folder.is_dir():
        return
    stems = {item.name for item in inputs}
    formats = {output_format.value for output_format in outputs.formats}
    deadline = time.monotonic() + WORKERS_STOP
    with contextlib.suppress(AttnvizError), FolderLock(folder, shard):
        while held := [
            path
            for path, name in temporaries(folder)
            if _written_for(name, stems, formats) and not remove_if_abandoned(path)
        ]:
            if time.monotonic() >= deadline:
                warn(
                    f"{len(held)} temporary file(s) in {folder} still held by a worker"
                    f" ({held[0].name}); the next batch into the folder removes them"
                )
                return
            time.sleep(0.05)


WORKERS_STOP = 10.0  # seconds: Ray stops a job's workers once its driver has left


def _written_for(name: str, stems: set[str], formats: set[str]) -> bool:
    """Whether ``name`` is one of the files :func:`write_outputs` writes for these stems."""
    base, _, extension = name.rpartition(".")
    without_head = re.sub(r"-H\d+$", "", base)
    without_layer = re.sub(r"-L\d+$", "", without_head)
    return extension in formats and not stems.isdisjoint({base, without_head, without_layer})


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


def run_batch(
    inputs: Sequence[BatchInput],
    extract: Callable[[list[BatchInput]], list[AttentionMaps]],
    outputs: Outputs,
    *,
    plan: FolderPlan,
    batch_size: int,
    jobs: int,
    progress: Callable[[int, int], None],
    tally: Tally | None = None,
) -> Tally:
    """Run every input; return what was done. Raises PartialFailure if some failed.

    ``extract`` turns a chunk of readable inputs into their maps; when it fails
    for a chunk, its inputs are retried one by one so that only the bad ones
    fail. Rendering runs here (jobs 1) or in worker processes, while the next
    chunk is extracted.
    """
    tally = tally if tally is not None else Tally()
    pending, manifest = start_batch(inputs, outputs, plan, tally)
    done = tally.skipped
    progress(done, len(inputs))
    records = tally.records
    finished = False
    try:
        with RenderPool(jobs) as renderer:
            for chunk in _chunks(pending, batch_size):
                for task in _tasks(chunk, extract, outputs):
                    renderer.submit(task)
                for item, written in renderer.completed(wait=False):
                    done = _finish(item, written, manifest, records, done, len(inputs), progress)
            for item, written in renderer.completed(wait=True):
                done = _finish(item, written, manifest, records, done, len(inputs), progress)
        finished = True
    finally:
        manifest.close(finished=finished)
    check_failures(records, len(inputs), plan.manifest)
    return tally


def start_batch(
    inputs: Sequence[BatchInput], outputs: Outputs, plan: FolderPlan, tally: Tally
) -> tuple[list[BatchInput], Manifest]:
    """The inputs still to do (with --resume, those the folder's manifests do not record
    as done for today's request, files whole), and the manifest to record them in."""
    request = outputs.fingerprint()
    pending = [
        item
        for item in inputs
        if not is_complete(plan.earlier.get(item.index), item, outputs.folder, request)
    ]
    tally.skipped = len(inputs) - len(pending)
    remove_replaced(plan)
    return pending, Manifest(plan, request=request)


def check_failures(records: Sequence[Record], total: int, manifest_path: Path) -> None:
    failed = [record for record in records if record.status == "failed"]
    if failed:
        first = failed[0]
        error = str(first.error)  # a reading error names its line already
        where = "" if error.startswith(f"line {first.line} ") else f"line {first.line}: "
        raise PartialFailure(
            f"{len(failed)} of {total} inputs failed (first: {where}{error}); see {manifest_path}"
        )


def _finish(
    item: BatchInput,
    written: dict[str, FileDigest] | Exception,
    manifest: Manifest,
    records: list[Record],
    done: int,
    total: int,
    progress: Callable[[int, int], None],
) -> int:
    record_done(_record(item, written, manifest.request), manifest, records)
    progress(done + 1, total)
    return done + 1


def record_done(record: Record, manifest: Manifest, records: list[Record]) -> None:
    """An input recorded in the manifest and among this run's records as one step: a
    Ctrl-C (or SIGTERM) in between waits until both are done, so that the summary of an interrupted
    batch counts what its manifest holds."""
    with signals.deferred():
        manifest.add(record)
        records.append(record)


Task = tuple[BatchInput, "AttentionMaps | Exception", Outputs]


def _tasks(
    chunk: list[BatchInput],
    extract: Callable[[list[BatchInput]], list[AttentionMaps]],
    outputs: Outputs,
) -> Iterator[Task]:
    readable = [item for item in chunk if item.error is None]
    try:
        results: dict[int, AttentionMaps | Exception] = dict(
            zip((item.index for item in readable), extract(readable), strict=True)
        )
    except (AttnvizError, ValueError):
        results = {}
        for item in readable:  # find the inputs that fail, keep the rest
            try:
                (results[item.index],) = extract([item])
            except (AttnvizError, ValueError) as error:
                results[item.index] = error
    for item in chunk:
        maps: AttentionMaps | Exception = (
            UsageError(item.error) if item.error is not None else results[item.index]
        )
        yield item, maps, outputs


def _chunks(items: Sequence[BatchInput], size: int) -> Iterator[list[BatchInput]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _record(item: BatchInput, written: dict[str, FileDigest] | Exception, request: dict) -> Record:
    base: dict[str, Any] = {
        "index": item.index,
        "line": item.line,
        "id": item.id,
        "text": item.text,
        "target": item.target,
        "pair": item.pair,
        "request": request,
    }
    if isinstance(written, Exception):
        return Record(**base, status="failed", error=describe(written)[1])
    return Record(**base, status="ok", files=list(written), digests=written)


def records_of(
    inputs: Sequence[BatchInput],
    extract: Callable[[list[BatchInput]], list[AttentionMaps]],
    outputs: Outputs,
    painter: Painter,
    batch_size: int,
) -> Iterator[Record]:
    """Each input's files written here and its manifest record, ``batch_size`` inputs per
    model pass: the work of an engine whose workers write into the folder themselves
    (Ray's), each batch cut as the local engine cuts it."""
    fingerprint = outputs.fingerprint()
    for chunk in _chunks(inputs, batch_size):
        for task in _tasks(chunk, extract, outputs):
            yield _record(*render_task(task, painter), fingerprint)


def render_task(
    task: Task, painter: Painter
) -> tuple[BatchInput, dict[str, FileDigest] | Exception]:
    """One input's files, or the exception that stopped it: a worker's unit of work."""
    item, maps, outputs = task
    if isinstance(maps, Exception):
        return item, maps
    try:
        return item, write_outputs(maps, item.name, outputs, painter)
    except (AttnvizError, OSError, ValueError) as error:
        return item, error


# A worker process's own painter: each worker renders with the canvases it built.
_worker_painter: Painter | None = None


def _start_worker() -> None:
    import signal

    global _worker_painter
    # Ctrl-C reaches every process of the group; the main process alone handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    _worker_painter = Painter()
    # Import matplotlib now, while the main process is still importing torch.
    import matplotlib.figure  # noqa: F401


def _die_with_parent() -> None:
    """On Linux, ask the kernel to end this worker when the batch process ends, however
    it ends (kill -9 included), rather than leave it rendering for nobody."""
    import ctypes
    import multiprocessing
    import signal
    import sys

    parent_process = multiprocessing.parent_process()
    if not sys.platform.startswith("linux") or parent_process is None:
        return
    parent = parent_process.pid
    set_parent_death_signal = 1  # PR_SET_PDEATHSIG, from <linux/prctl.h>
    try:
        ctypes.CDLL(None, use_errno=True).prctl(set_parent_death_signal, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _render_in_worker(task: Task) -> tuple[BatchInput, dict[str, FileDigest] | Exception]:
    assert _worker_painter is not None, "the pool's initializer makes the painter"
    return render_task(task, _worker_painter)


class WorkerDied(AttnvizError):
    """The worker process rendering an input ended without an answer (killed, or out of
    memory): that input fails, the batch goes on."""


class RenderPool:
    """Renders in this process (jobs 1) or in a pool of worker processes, in input order.

    If a worker dies, the inputs it held fail and the rest are rendered here.
    """

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.painter = Painter()
        self.pool: Any = None
        self.queue: deque[tuple[BatchInput, Any]] = deque()  # (input, future or result)

    def __enter__(self) -> RenderPool:
        if self.jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn, not fork: a fork of a process running torch's threads can deadlock.
            self.pool = ProcessPoolExecutor(
                max_workers=self.jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
            )
            self.pool.submit(int)  # start the workers now, while the first inputs are extracted
            # torch's thread count is left alone: with fewer threads its sums run in
            # another order, and the same text must give the same numbers whatever --jobs.
        return self

    def submit(self, task: Task) -> None:
        from concurrent.futures.process import BrokenProcessPool

        item = task[0]
        if self.pool is not None:
            try:
                self.queue.append((item, self.pool.submit(_render_in_worker, task)))
                return
            except BrokenProcessPool:
                self._stop_pool()
        self.queue.append((item, render_task(task, self.painter)))

    def completed(
        self, wait: bool
    ) -> Iterator[tuple[BatchInput, dict[str, FileDigest] | Exception]]:
        """Finished results in input order; with ``wait``, all of them."""
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        while self.queue:
            item, head = self.queue[0]
            if isinstance(head, Future):
                if not wait and not head.done() and len(self.queue) <= 4 * self.jobs:
                    return  # keep the workers busy while the next chunk is extracted
                try:
                    head = head.result()
                except BrokenProcessPool:
                    self._stop_pool()
                    head = (item, WorkerDied("the worker process rendering it died"))
            self.queue.popleft()
            yield head

    def _stop_pool(self) -> None:
        """A broken pool takes no more work: what comes next is rendered here."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
