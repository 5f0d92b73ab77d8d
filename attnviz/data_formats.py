"""The formats maps are stored in, encoded and decoded.

- ``json``: one AttentionMaps document (its ``schema_version`` says which schema).
- ``ndjson``: one document per line, for streams of inputs.
- ``npz``: numpy arrays (``weights``, ``layers``, ``heads``, ``query_tokens``,
  ``key_tokens``) and a ``meta`` JSON string with the other fields.
- ``csv``: long form, a row per weight: input, layer, head, query_index,
  query_token, key_index, key_token, weight.

This module encodes (JSON and CSV text, a document's fields) and reads them back;
:mod:`attnviz.maps_files` writes maps in them, as :mod:`attnviz.writers`' table says.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from attnviz.atomic_files import STDIO
from attnviz.choices import Aggregate
from attnviz.errors import AttnvizError, SchemaError, UsageError
from attnviz.inputs import BOM, decode, stdin_bytes
from attnviz.request import Recorded
from attnviz.safe_text import display_label
from attnviz.schema import READABLE_VERSIONS

# Characters that JSON may carry raw but that would reorder or break what a terminal
# shows of a document (bidi marks and overrides, line and paragraph separators): written
# as \u escapes, which decode to the same strings. JSON escapes control characters itself.
_HIDDEN_IN_JSON = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def dump_json(document: Any) -> str:
    """The one JSON spelling of every document attnviz writes: compact, UTF-8, one line;
    never NaN or Infinity, which are no JSON (a reader such as JavaScript's JSON.parse
    rejects the whole document): a document holding one is an error."""
    text = strict_json(document, ensure_ascii=False)
    return _HIDDEN_IN_JSON.sub(lambda found: f"\\u{ord(found[0]):04x}", text) + "\n"


# A JSON string, or a negative zero standing as a number (-0.0 is written as 0.0: a zero
# difference has no sign worth showing, and "-0.0" reads as a negative result).
_STRING_OR_NEGATIVE_ZERO = re.compile(r'"(?:[^"\\]|\\.)*"|-0\.0(?![0-9eE])')


def strict_json(value: Any, ensure_ascii: bool = True) -> str:
    """``value`` as compact JSON, a non-finite number refused and a negative zero written
    as 0.0: what every JSON attnviz writes goes through (a row of weights, numbers alone,
    needs no scan for hidden characters; the page's data is ASCII)."""
    try:
        text = json.dumps(value, ensure_ascii=ensure_ascii, separators=(",", ":"), allow_nan=False)
    except ValueError:
        raise AttnvizError(
            "a result holds a number that is not finite (NaN or infinity), which JSON cannot "
            "hold: nothing was written (see the model's weights)"
        ) from None
    if "-0.0" not in text:
        return text
    return _STRING_OR_NEGATIVE_ZERO.sub(lambda found: found[0].lstrip("-"), text)


# A text cell a spreadsheet would read as a formula: one that begins with =, +, - or @
# (after any apostrophes, so that the rule reads back: see csv_text).
_FORMULA = re.compile(r"'*[=+\-@]")


def csv_text(text: str) -> str:
    """A text cell of CSV: shown as the terminal shows it (control characters made
    visible), and never a formula: a cell a spreadsheet would run (``=cmd|calc``,
    ``+1``, ``-x``, ``@SUM``) gets an apostrophe before it, which spreadsheets hide.
    To read a cell back, drop the first character of a cell that is apostrophes and then
    one of ``=+-@`` (the rule's cells, and only they, begin so)."""
    shown = display_label(text)
    return f"'{shown}" if _FORMULA.match(shown) else shown


def _csv_cell(value: Any) -> Any:
    if isinstance(value, str):
        return csv_text(value)
    return value + 0.0 if isinstance(value, float) else value  # -0.0 written as 0.0


def dump_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str], delimiter: str = ",") -> str:
    """Rows of a table as CSV with a header line, lines ended as the maps' CSV ends them.
    Every text cell (a token, a text, a model's name) is :func:`csv_text`, as the maps'
    CSV writes its tokens: every command's table comes through here."""
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=list(columns), delimiter=delimiter, lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows({name: _csv_cell(value) for name, value in row.items()} for row in rows)
    return buffer.getvalue()


def read_documents(source: str) -> Iterator[tuple[Any, str]]:
    """The documents saved in a json, ndjson or npz file, or ``-`` for stdin, each with
    where it was read (the file, and its line in ndjson), for errors to say where.
    (:func:`attnviz.maps_files.read_maps` makes them maps.)"""
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
    """A JSON value; one nested deeper than Python can read, or holding a whole number
    longer than Python reads (4,300 digits), is no document attnviz wrote (its maps nest
    four lists deep, and their numbers are weights and indexes)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise SchemaError(f"{where} nests its JSON too deep to be attention maps") from None
    except json.JSONDecodeError:
        raise
    except ValueError:
        raise SchemaError(f"{where} holds a number too long to read: no attention maps") from None


# The arrays of an npz archive of maps; its other fields are the JSON string "meta".
NPZ_ARRAYS = ("weights", "layers", "heads", "query_tokens", "key_tokens")
_NPZ_MEMBERS = (*NPZ_ARRAYS, "meta")


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
        **{member: arrays[member].tolist() for member in NPZ_ARRAYS if member != "weights"},
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
    """Each weight as text: float16 with its own shortest digits, float32 with eight; a
    negative zero (a difference of maps) as 0."""
    matrix = matrix + matrix.dtype.type(0)  # -0.0 + 0.0 is 0.0
    if matrix.dtype == np.float16:
        return matrix.astype(str)
    return np.char.mod("%.8g", matrix)


# The AttentionMaps document: its fields encoded, and decoded with each one checked.

_VERSION_1_AGGREGATES = {aggregate.description: aggregate for aggregate in Aggregate}


def fields_of(document: Any) -> dict[str, Any]:
    """The fields of the AttentionMaps a document written by :func:`document_of` (schema
    1 or 2) holds, each checked; the maps check what they hold together as they are made."""
    if not isinstance(document, dict):
        raise SchemaError("an AttentionMaps document must be a JSON object")
    version = document.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:  # true is no 1
        raise SchemaError(
            f"schema_version {json.dumps(version)} is not supported (this attnviz reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))})"
        )
    required = ("model", "mode", "query_tokens", "key_tokens", "layers", "heads", "weights")
    missing = [name for name in required if name not in document]
    if missing:
        raise SchemaError(f"document is missing {', '.join(missing)}")
    aggregate = document.get("aggregate")
    if version == 1 and aggregate is not None:
        aggregate = _VERSION_1_AGGREGATES.get(aggregate, aggregate)
    try:
        weights = np.asarray(document["weights"])  # made float32 (or refused) by the maps
        return dict(
            query_tokens=[str(token) for token in document["query_tokens"]],
            key_tokens=[str(token) for token in document["key_tokens"]],
            weights=weights,
            layers=_indexes(document["layers"], "layers"),
            heads=_indexes(document["heads"], "heads"),
            mode=str(document["mode"]),  # made a Mode, or refused, by the maps
            model=str(document["model"]),
            text=str(document.get("text", "")),
            target=document.get("target"),
            aggregate=aggregate,
            query_special=_list_of(bool, document.get("query_special"), _FLAGS),
            key_special=_list_of(bool, document.get("key_special"), _FLAGS),
            prompt_length=_optional_int(document.get("prompt_length"), "prompt_length"),
            pair=_optional_str(document.get("pair"), "pair"),
            pair_start=_optional_int(document.get("pair_start"), "pair_start"),
            between=_optional_str(document.get("between"), "between"),
            query_positions=_positions(document.get("query_positions"), "query_positions"),
            pooled=_optional_int(document.get("pooled"), "pooled"),
            span=_positions(document.get("span"), "span"),
            recorded=Recorded.read(document),
            layer_kinds=_list_of(str, document.get("layer_kinds"), _KINDS),
        )
    except (TypeError, ValueError) as error:
        raise SchemaError(f"malformed document: {error}") from None


_FLAGS = "query_special and key_special must be lists of true and false"
_KINDS = "layer_kinds must be a list of texts"


def _list_of(kind: type, value: Any, refusal: str) -> list | None:
    """A document's optional list of ``kind`` (None where absent), else ``refusal``."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(each, kind) for each in value):
        raise SchemaError(refusal)
    return value


def plain_weights(weights: np.ndarray) -> list:
    """Nested lists of Python floats. float16 weights are written with the digits float16
    has (0.1, not 0.0999755859375), so that float16 documents are half the size."""
    if weights.dtype == np.float16:
        return weights.astype(str).astype(np.float64).tolist()  # numpy's shortest repr
    return weights.tolist()


def _positions(values: Any, name: str) -> list[int] | None:
    if values is None:
        return None
    if not isinstance(values, list) or not all(
        isinstance(value, int) and not isinstance(value, bool) for value in values
    ):
        raise SchemaError(f"{name} must be a list of token positions")
    return values


def _indexes(values: Any, name: str) -> list[int]:
    """Layer or head indexes: whole numbers, 0 or more, each once (1.5 is no layer, and
    a layer held twice would be counted twice)."""
    if not isinstance(values, list) or not all(
        isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in values
    ):
        raise SchemaError(f"{name} must be a list of indexes (whole numbers, 0 or more)")
    if len(set(values)) != len(values):
        raise SchemaError(f"{name} lists an index twice: {values}")
    return values


def _optional_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"{name} must be a whole number, not {value!r}")
    return value


def _optional_str(value: Any, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise SchemaError(f"{name} must be a string, not {value!r}")
    return value
