"""Reading inputs and saved maps; writing documents with nothing half-written on failure.

Formats of saved maps:

- ``json``: one AttentionMaps document (its ``schema_version`` says which schema).
- ``ndjson``: one document per line, for streams of inputs.
- ``npz``: numpy arrays (``weights``, ``layers``, ``heads``, ``query_tokens``,
  ``key_tokens``) and a ``meta`` JSON string with the other fields.
- ``csv``: long form, a row per weight: input, layer, head, query_index,
  query_token, key_index, key_token, weight.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import re
import stat
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Output
from attnviz.errors import AttnvizError, SchemaError, UsageError
from attnviz.tokens import display_label

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps

STDIO = "-"
BOM = "\ufeff"  # a byte-order mark some editors put first: not text


CSV_HEADER = (
    "input",
    "layer",
    "head",
    "query_index",
    "query_token",
    "key_index",
    "key_token",
    "weight",
)


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        byte, offset = data[error.start], error.start
        raise UsageError(
            f"{where} is not UTF-8 text: byte 0x{byte:02x} at offset {offset}"
        ) from None


def _stdin_bytes() -> IO[bytes]:
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
    stream = _stdin_bytes()
    seen = False
    try:
        for number, raw in enumerate(stream, start=1):
            if number == 1 and raw.startswith(_ZIP):
                raise UsageError(_NOT_TEXT.format("an npz archive (attention maps?)"))
            line = _decode(raw, f"standard input line {number}").rstrip("\r\n")
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


@contextlib.contextmanager
def open_output(
    destination: str | Path, *, binary: bool = False, follow_links: bool = True
) -> Iterator[IO[Any]]:
    """A stream to write to: stdout for ``-``, else a file that appears only when complete.

    A regular file (or none yet) is written under a temporary name in its own
    folder and renamed into place on success, keeping an existing file's
    permission bits; on any failure the temporary file is removed, so an
    interrupted write never leaves a truncated file. A character device, FIFO
    or socket (``/dev/null``, ``/dev/stdout``, a named pipe) is written
    through, never replaced. A symbolic link is followed to its target, which
    is replaced atomically; with ``follow_links=False`` (a batch's own folder)
    the link itself is replaced, so nothing lands outside the folder.
    """
    if str(destination) == STDIO:
        stream = sys.stdout.buffer if binary else sys.stdout
        yield WholeWrites(stream)
        stream.flush()
        return
    path = Path(destination)
    if path.is_symlink() and not follow_links:
        target = path
    else:
        if _is_special(path):
            yield from _write_through(path, binary)
            return
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if target.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory; give a file name")
    if not target.parent.is_dir():
        raise AttnvizError(f"cannot write {path}: folder {target.parent} does not exist")
    mode_bits = _regular_file_mode(target)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as error:
        raise AttnvizError(f"cannot write {path}: {error.strerror}") from None
    try:
        mode = "wb" if binary else "w"
        encoding = None if binary else "utf-8"
        with os.fdopen(descriptor, mode, encoding=encoding, newline=None if binary else "") as out:
            _mark_as_being_written(descriptor)
            yield out
            out.flush()
            # mkstemp made it private: give it the mode the file had, or the usual one.
            os.chmod(temporary, mode_bits if mode_bits is not None else usual_mode())
            if os.name == "posix":  # renamed before closing, which would drop the mark
                os.replace(temporary, target)
        if os.name != "posix":  # Windows renames no open file
            os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# The temporary name of open_output: its prefix, then mkstemp's eight characters.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}")


def _mark_as_being_written(descriptor: int) -> None:
    """A lock on a temporary file while its writer is at work. The system drops it when
    the writer ends, however it ends (kill -9, a Ray worker stopped with its job), so
    that a temporary file left unlocked is one that nobody will finish."""
    with contextlib.suppress(ImportError, OSError):  # no POSIX locks: left unmarked
        import fcntl

        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)


def temporaries(folder: Path) -> Iterator[tuple[Path, str]]:
    """The temporary files of :func:`open_output` in ``folder``, each with the name it
    was being written as."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            match = _TEMPORARY.fullmatch(entry.name)
            if match and entry.is_file(follow_symlinks=False):
                yield Path(entry.path), match["name"]


def remove_if_abandoned(path: Path) -> bool:
    """Remove a temporary file of :func:`open_output` whose writer ended without
    finishing it; False, leaving it, while a writer holds it (or where the system cannot
    tell). A writer in this very process is not seen: call it between writes."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:  # finished meanwhile, or removed
        return True
    except OSError:
        return False
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by its writer (EAGAIN, EACCES), or no locks here
        return False
    else:
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(descriptor)


class _Probe(Exception):
    pass


def check_writable(destination: str | Path) -> None:
    """Refuse now, before long work, a file that :func:`open_output` could not write:
    it is opened and abandoned, which removes its temporary file and leaves whatever
    the name held untouched."""
    if str(destination) == STDIO or _is_special(Path(destination)):
        return
    with contextlib.suppress(_Probe), open_output(destination, binary=True):
        raise _Probe


def _is_special(path: Path) -> bool:
    """A device, FIFO or socket (following links): written through, never replaced."""
    try:
        mode = path.stat().st_mode
    except OSError:  # not there (or a dangling link): a file to create
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_through(path: Path, binary: bool) -> Iterator[IO[Any]]:
    try:
        out = path.open("wb" if binary else "w", **({} if binary else {"encoding": "utf-8"}))
    except OSError as error:
        raise AttnvizError(f"cannot write {path}: {error.strerror}") from None
    with out:
        yield WholeWrites(out)


class WholeWrites:
    """A stream whose every write is whole. Python's writers hand a pipe one write(2),
    which Linux caps at 2 GiB - 4 KiB; the rest is dropped, silently in text mode (an
    npz of 2.2 GB into a pipe arrived cut at 2,147,479,552 bytes). Writes are made in
    pieces under that cap, each repeated until the stream took all of it."""

    BYTES = 1 << 30  # a piece of bytes
    CHARACTERS = 1 << 28  # a piece of text: at most 4 bytes a character in UTF-8

    def __init__(self, stream: IO[Any]) -> None:
        self.stream = stream

    def write(self, data: Any) -> int:
        if isinstance(data, str):
            for start in range(0, len(data), self.CHARACTERS):
                self.stream.write(data[start : start + self.CHARACTERS])
            return len(data)
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            piece = view[: self.BYTES]
            written = self.stream.write(piece)  # None: a raw stream took all of it
            view = view[len(piece) if written is None else written :]
        return total

    def writelines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _regular_file_mode(path: Path) -> int | None:
    """The permission bits of the regular file at ``path`` itself (a link's own 0777 is
    no file's mode), or None for anything else."""
    try:
        status = path.lstat()
    except OSError:
        return None
    return stat.S_IMODE(status.st_mode) if stat.S_ISREG(status.st_mode) else None


def file_blake2b(path: Path, digest_size: int = 64) -> str:
    """The BLAKE2b digest of a file, read a piece at a time (weights run to gigabytes)."""
    digest = hashlib.blake2b(digest_size=digest_size)
    with open(path, "rb") as stream:
        while piece := stream.read(1 << 22):
            digest.update(piece)
    return digest.hexdigest()


def usual_mode(folder: bool = False) -> int:
    """The permission bits a new file (or folder) gets from the user's umask: what a
    file made by a private temporary name is given when it takes its place."""
    current = os.umask(0)
    os.umask(current)
    return (0o777 if folder else 0o666) & ~current


def write_text(content: str, destination: str | Path) -> None:
    with open_output(destination) as out:
        out.write(content)


def dump_json(document: Any) -> str:
    """The one JSON spelling of every document attnviz writes: compact, UTF-8, one line."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"


def dump_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows of a table as CSV with a header line, lines ended as the maps' CSV ends them."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def npz_bytes(maps: AttentionMaps) -> bytes:
    """:func:`write_npz` into bytes."""
    buffer = io.BytesIO()
    write_npz(maps, buffer)
    return buffer.getvalue()


def write_npz(maps: AttentionMaps, out: IO[bytes]) -> None:
    """An npz archive as numpy.load reads it, stored uncompressed as numpy.savez does
    (attention weights are float32 noise to zlib: even its fastest level saved 7% of a
    MiniLM batch's bytes for a fifth of its time; ``--dtype float16`` halves them) and
    with fixed member dates, so that the same maps give the same bytes. Each array is
    written straight into its member: a long input's weights are not copied first
    (an unseekable stream, a pipe, gets the archive made in memory)."""
    if not out.seekable():
        buffer = io.BytesIO()
        write_npz(maps, buffer)
        out.write(buffer.getbuffer())
        return
    meta = {
        key: value for key, value in maps.to_dict(weights=False).items() if key not in _NPZ_ARRAYS
    }
    arrays = {
        "weights": maps.weights,
        "layers": np.asarray(maps.layers, dtype=np.int64),
        "heads": np.asarray(maps.heads, dtype=np.int64),
        "query_tokens": np.asarray(maps.query_tokens, dtype=str),
        "key_tokens": np.asarray(maps.key_tokens, dtype=str),
        "meta": np.asarray(json.dumps(meta, ensure_ascii=False)),
    }
    with zipfile.ZipFile(out, "w") as archive:
        for name, array in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_STORED
            with archive.open(member, "w", force_zip64=array.nbytes > 2**30) as stream:
                np.lib.format.write_array(stream, array, allow_pickle=False)


_NPZ_ARRAYS = ("weights", "layers", "heads", "query_tokens", "key_tokens")


def write_csv_rows(out: IO[str], maps: AttentionMaps, input_index: int) -> None:
    """The long form of one input: a row per (layer, head, query, key). Tokens are
    written as the terminal shows them, control characters made visible: CSV is read
    on terminals, and a token is never an instruction to one."""
    writer = csv.writer(out, lineterminator="\n")
    query_tokens = [display_label(token) for token in maps.query_tokens]
    key_tokens = [display_label(token) for token in maps.key_tokens]
    for panel in maps.panels():
        # An empty layer or head cell: the map was combined over that axis (an aggregate).
        layer, head = ("" if index is None else index for index in (panel.layer, panel.head))
        cells = cell_texts(panel.matrix)
        for q, query in enumerate(query_tokens):
            writer.writerows(
                (input_index, layer, head, q, query, k, key, cells[q, k])
                for k, key in enumerate(key_tokens)
            )


def write_maps(
    stream: Iterable[AttentionMaps], data_format: Output, destination: str | Path
) -> int:
    """Write every input's maps in one format; return how many were written.

    ``ndjson`` and ``csv`` write each record as soon as it is computed, each
    record in one piece, so a reader (or an error mid-stream) only ever sees
    whole records. ``json`` and ``npz`` hold exactly one input.
    """
    if data_format in (Output.JSON, Output.NPZ):
        items = iter(stream)
        first = next(items)
        if next(items, None) is not None:
            raise UsageError(
                f"several inputs: {data_format.value} holds one; use --format ndjson or csv"
            )
        if data_format is Output.JSON:
            write_text(dump_json(first.to_dict()), destination)
        else:
            with open_output(destination, binary=True) as out:
                write_npz(first, out)
        return 1
    count = 0
    with open_output(destination) as out:
        if data_format is Output.CSV:
            out.write(",".join(CSV_HEADER) + "\n")
        for count, maps in enumerate(stream, start=1):
            if data_format is Output.NDJSON:
                record = dump_json(maps.to_dict())
            else:
                buffer = io.StringIO()
                write_csv_rows(buffer, maps, count - 1)
                record = buffer.getvalue()
            out.write(record)
            out.flush()
    return count


def read_documents(source: str) -> Iterator[tuple[Any, str]]:
    """The documents saved in a json, ndjson or npz file, or ``-`` for stdin, each with
    where it was read (the file, and its line in ndjson), for errors to say where.
    (:func:`attnviz.maps.read_maps` makes them maps.)"""
    name = "standard input" if source == STDIO else source
    try:
        data = _stdin_bytes().read() if source == STDIO else Path(source).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no such file: {source}") from None
    except IsADirectoryError:
        raise UsageError(f"{source} is a directory, not a file of saved maps") from None
    except OSError as error:
        raise AttnvizError(f"cannot read {name}: {error.strerror or error}") from None
    if data.startswith(b"PK"):
        yield _read_npz(data, name), name
        return
    text = _decode(data, name).removeprefix(BOM).strip()
    if not text:
        raise SchemaError(f"{name} is empty")
    try:  # one document (pretty-printed or not), or a list of them
        document = _json(text, name)
    except json.JSONDecodeError as error:
        if "\n" not in text or text.startswith("["):
            raise SchemaError(f"{name} is not valid JSON ({error})") from None
    else:
        if document == []:
            raise SchemaError(f"{name} is an empty list: it holds no maps")
        for item in document if isinstance(document, list) else [document]:
            yield item, name
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            document = _json(line, where)
        except json.JSONDecodeError as error:
            raise SchemaError(f"{where} is not valid JSON ({error})") from None
        yield document, where


def _json(text: str, where: str) -> Any:
    """A JSON value; one nested deeper than Python can read is no document attnviz wrote
    (its maps nest four lists deep)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise SchemaError(f"{where} nests its JSON too deep to be attention maps") from None


_NPZ_MEMBERS = (*_NPZ_ARRAYS, "meta")


def _read_npz(data: bytes, name: str) -> dict[str, Any]:
    """The document in an npz archive, each member checked before it is read: an array
    as long as its header says, of numbers or text (never pickled objects)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise SchemaError(
            f"{name} is not a whole npz archive (cut short or damaged: {error})"
        ) from None
    with archive:
        present = set(archive.namelist())
        missing = [member for member in _NPZ_MEMBERS if f"{member}.npy" not in present]
        if missing:
            raise SchemaError(
                f"{name} is an npz archive without {', '.join(missing)}: not maps attnviz wrote"
            )
        arrays = {member: _npy_member(archive, member, name) for member in _NPZ_MEMBERS}
    try:
        meta = _json(str(arrays["meta"]), name)
    except json.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict):
        raise SchemaError(f"{name}: its meta member is not a JSON object")
    return {
        **meta,
        "weights": arrays["weights"],
        **{member: arrays[member].tolist() for member in _NPZ_ARRAYS if member != "weights"},
    }


def _npy_member(archive: zipfile.ZipFile, member: str, name: str) -> np.ndarray:
    info = archive.getinfo(f"{member}.npy")
    where = f"{name}: {member}.npy"
    try:
        with archive.open(info) as stream:
            version = np.lib.format.read_magic(stream)
            if version not in ((1, 0), (2, 0)):
                raise SchemaError(f"{where} is an .npy array of version {version}, not 1 or 2")
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran_order, dtype = read_header(stream)
            if dtype.hasobject:
                raise SchemaError(f"{where} holds Python objects, which attnviz never writes")
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            held = info.file_size - stream.tell()
            if held != size:
                raise SchemaError(
                    f"{where} holds {held} bytes for a {dtype} array of shape {shape} "
                    f"({size} bytes): cut short or damaged"
                )
            buffer = bytearray(size)
            stream.readinto(buffer)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        raise SchemaError(f"{where} cannot be read ({error})") from None
    order = "F" if fortran_order else "C"
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def cell_texts(matrix: np.ndarray) -> np.ndarray:
    """Each weight as text: float16 with its own shortest digits, float32 with eight."""
    if matrix.dtype == np.float16:
        return matrix.astype(str)
    return np.char.mod("%.8g", matrix)
