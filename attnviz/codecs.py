"""The formats maps are stored in, encoded and decoded.

- ``json``: one AttentionMaps document (its ``schema_version`` says which schema).
- ``ndjson``: one document per line, for streams of inputs.
- ``npz``: numpy arrays (``weights``, ``layers``, ``heads``, ``query_tokens``,
  ``key_tokens``) and a ``meta`` JSON string with the other fields.
- ``csv``: long form, a row per weight: input, layer, head, query_index,
  query_token, key_index, key_token, weight.

Which output is written by which of these is :mod:`attnviz.writers`' table.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, cast

import numpy as np

from attnviz.errors import AttnvizError, SchemaError, UsageError
from attnviz.files import STDIO
from attnviz.inputs import BOM, decode, stdin_bytes
from attnviz.tokens import display_label

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


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


def read_documents(source: str) -> Iterator[tuple[Any, str]]:
    """The documents saved in a json, ndjson or npz file, or ``-`` for stdin, each with
    where it was read (the file, and its line in ndjson), for errors to say where.
    (:func:`attnviz.maps.read_maps` makes them maps.)"""
    name = "standard input" if source == STDIO else source
    try:
        data = stdin_bytes().read() if source == STDIO else Path(source).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no such file: {source}") from None
    except IsADirectoryError:
        raise UsageError(f"{source} is a directory, not a file of saved maps") from None
    except OSError as error:
        raise AttnvizError(f"cannot read {name}: {error.strerror or error}") from None
    if data.startswith(b"PK"):
        yield _read_npz(data, name), name
        return
    text = decode(data, name).removeprefix(BOM).strip()
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
            cast(zipfile.ZipExtFile, stream).readinto(buffer)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        raise SchemaError(f"{where} cannot be read ({error})") from None
    order: Literal["C", "F"] = "F" if fortran_order else "C"
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def cell_texts(matrix: np.ndarray) -> np.ndarray:
    """Each weight as text: float16 with its own shortest digits, float32 with eight."""
    if matrix.dtype == np.float16:
        return matrix.astype(str)
    return np.char.mod("%.8g", matrix)
