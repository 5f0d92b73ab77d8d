"""Maps written as json, npz and csv into a stream (:mod:`attnviz.writers`' data formats),
and read back from json, ndjson and npz.

A long input's weights are written a row at a time (json, csv) or straight into the
archive's member (npz), never copied whole into Python lists first.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterator
from typing import IO

import numpy as np

from attnviz.data_formats import (
    NPZ_ARRAYS,
    cell_texts,
    csv_text,
    dump_json,
    plain_weights,
    read_documents,
    strict_json,
)
from attnviz.errors import SchemaError
from attnviz.maps import AttentionMaps, document_of
from attnviz.panels import panels_of


def write_json(maps: AttentionMaps, out: IO[bytes]) -> None:
    """:func:`dump_json` of the maps' document, byte for byte, written a row of weights at
    a time: a whole nested list of Python floats (and its text) costs 20 to 90 times the
    array it comes from, so long inputs as JSON would need many times the maps' memory."""
    weights = maps.weights
    if weights.ndim < 2 or weights.size == 0:
        out.write(dump_json(document_of(maps, plain_weights(maps.weights))).encode("utf-8"))
        return
    # A placeholder marks the weights' place; a key's quotes are never escaped, so the
    # document's own `"weights":` is found however odd its tokens are.
    head, tail = dump_json(document_of(maps, 0)).split('"weights":0', 1)
    out.write(head.encode("utf-8") + b'"weights":' + b"[" * (weights.ndim - 1))
    for index, row in enumerate(weights.reshape(-1, weights.shape[-1])):
        if index:
            out.write(_row_separator(index, weights.shape))
        out.write(strict_json(plain_weights(row)).encode("utf-8"))
    out.write(b"]" * (weights.ndim - 1) + tail.encode("utf-8"))


def _row_separator(index: int, shape: tuple[int, ...]) -> bytes:
    """What stands between rows ``index - 1`` and ``index`` of weights of ``shape`` written
    as nested lists: a comma, after closing (and then opening) the lists that end there."""
    ended = 0
    for size in reversed(shape[1:-1]):
        if index % size:
            break
        ended += 1
        index //= size
    return b"]" * ended + b"," + b"[" * ended


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
        key: value for key, value in maps.to_dict(weights=False).items() if key not in NPZ_ARRAYS
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


def write_csv_rows(
    out: IO[str], maps: AttentionMaps, input_index: int, delimiter: str = ","
) -> None:
    """The long form of one input: a row per (layer, head, query, key), its cells
    separated by ``delimiter``. Tokens are :func:`csv_text`: written as the terminal
    shows them, control characters made visible (CSV is read on terminals, and a token is
    never an instruction to one), and never a spreadsheet's formula."""
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    query_tokens = [csv_text(token) for token in maps.query_tokens]
    key_tokens = [csv_text(token) for token in maps.key_tokens]
    # A row's query_index is its token's position, as json and npz record it (chosen rows
    # keep their positions; every row is its own position otherwise).
    positions = maps.query_positions or range(len(query_tokens))
    for panel in panels_of(maps):
        # An empty layer or head cell: the map was combined over that axis (an aggregate).
        layer, head = ("" if index is None else index for index in (panel.layer, panel.head))
        for row, position, query in zip(panel.matrix, positions, query_tokens, strict=True):
            cells = cell_texts(row)  # a row at a time: the text of every cell is 10x its weight
            writer.writerows(
                (input_index, layer, head, position, query, k, key, cells[k])
                for k, key in enumerate(key_tokens)
            )


def read_maps(source: str) -> Iterator[AttentionMaps]:
    """Saved maps from a json, ndjson or npz file, or ``-`` for stdin; errors say where."""
    for document, where in read_documents(source):
        try:
            yield AttentionMaps.from_dict(document)
        except SchemaError as error:
            raise SchemaError(f"{where}: {error}") from None
