"""The writers of every output that is a file or a stream of data: what
:data:`attnviz.outputs.OUTPUTS` names for each output, and the one :func:`write` that
every command, the notebook and a batch write maps through.

A writer turns one input's maps into pieces: (file name suffix, a function that writes
that file into a binary stream). Data and the page are one piece; a picture's head or
layer view can be several (``-L{layer}-H{head}``), which only a batch writes. How the
maps are shown or stored beyond their format (view, style, chosen heads, labels,
precision) is one :class:`Rendering`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from attnviz.atomic_files import open_output
from attnviz.choices import Dtype, Output, View
from attnviz.errors import UsageError
from attnviz.outputs import OUTPUTS, Kind, formats_named
from attnviz.render.style import Style
from attnviz.schema import envelope

if TYPE_CHECKING:
    from attnviz.analysis.effects import HeadEffects
    from attnviz.analysis.heads import TopHeads
    from attnviz.circuits.circuit import Circuit
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel

Piece = tuple[str, Callable[[IO[bytes]], object]]  # (file name suffix, writes the file)
ONE_TEXT = "attnviz batch makes one output per line"  # what to do with several inputs


@dataclass(frozen=True)
class Rendering:
    """How maps are written beyond their format; each writer reads what applies to it
    (:data:`attnviz.outputs.APPLIES_TO` says which option applies where)."""

    view: View = View.MODEL  # what a picture or the page shows (opens on)
    style: Style = field(default_factory=Style)  # a picture's colours, sizes and title
    top: TopHeads | None = None  # a picture draws only these heads, in rank order
    label_positions: bool = False  # pictures, the page and csv tell repeated labels apart
    dtype: Dtype = Dtype.FLOAT32  # how data stores the weights
    title: str = ""  # the page's heading ("" : the model and the mode)
    painter: object = None  # a Painter kept across inputs (a batch worker's); None: a new one
    effects: HeadEffects | None = None  # the page tints each head by its effects on an answer
    circuit: Circuit | None = None  # the page draws the circuit that carries the answer

    def labelled(self, maps: AttentionMaps) -> AttentionMaps:
        return maps.with_positions() if self.label_positions else maps

    def panels(self, maps: AttentionMaps) -> list[MapPanel] | None:
        """The heads ``top`` picks, a ranking that does not apply a usage error."""
        if self.top is None:
            return None
        try:
            return self.top.panels(maps)
        except ValueError as error:
            raise UsageError(f"--top-heads: {error}") from None


def _text(content: str) -> Callable[[IO[bytes]], object]:
    return lambda out: out.write(content.encode("utf-8"))


def _bytes(data: bytes) -> Callable[[IO[bytes]], object]:
    return lambda out: out.write(data)


# Each writer: (one input's maps, the output, how, the input's number in a stream of
# records) -> its pieces. attnviz.outputs names each output's writer. The data formats are
# imported where they are used: they need numpy, and a command's --help imports this.


def json_pieces(
    maps: AttentionMaps, output: Output, how: Rendering, number: int
) -> Iterator[Piece]:
    """One document (json), or one line of a stream of them (ndjson)."""
    # numpy: only where this format is written (the writers themselves are light)
    from attnviz.maps_files import write_json

    yield "", lambda out: write_json(maps.astype(how.dtype), out)


def npz_pieces(maps: AttentionMaps, output: Output, how: Rendering, number: int) -> Iterator[Piece]:
    # numpy: only where this format is written (the writers themselves are light)
    from attnviz.maps_files import write_npz

    yield "", lambda out: write_npz(maps.astype(how.dtype), out)


def csv_pieces(maps: AttentionMaps, output: Output, how: Rendering, number: int) -> Iterator[Piece]:
    """The long form's rows of one input, ``number`` its place in the stream."""
    # numpy: only where this format is written (the writers themselves are light)
    from attnviz.maps_files import write_csv_rows

    def write_rows(out: IO[bytes]) -> None:
        text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
        try:
            maps_of = how.labelled(maps.astype(how.dtype))
            write_csv_rows(text, maps_of, number, OUTPUTS[output].delimiter or ",")
            text.flush()
        finally:
            text.detach()  # the destination stays open: its opener closes it

    yield "", write_rows


def picture_pieces(
    maps: AttentionMaps, output: Output, how: Rendering, number: int
) -> Iterator[Piece]:
    from attnviz.render.image import Painter  # matplotlib: only where a picture is drawn

    painter = how.painter if isinstance(how.painter, Painter) else Painter()
    drawn = painter.files(how.labelled(maps), how.view, output, how.style, how.panels(maps))
    for suffix, data in drawn:
        yield suffix, _bytes(data)


def page_pieces(
    maps: AttentionMaps, output: Output, how: Rendering, number: int
) -> Iterator[Piece]:
    # numpy: only where this format is written (the writers themselves are light)
    from attnviz.render.page import page_html

    page = page_html(
        how.labelled(maps),
        view=how.view,
        title=how.title,
        effects=how.effects,
        circuit=how.circuit,
    )
    yield "", _text(page)


# The long form's columns: csv's header line, what a file of records begins with.
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
HEADERS = {
    output: spec.delimiter.join(CSV_HEADER) + "\n"
    for output, spec in OUTPUTS.items()
    if spec.delimiter is not None
}


def pieces(maps: AttentionMaps, output: Output, how: Rendering, number: int = 0) -> Iterator[Piece]:
    """The files ``output`` makes of one input's maps, by the writer the registry names."""
    name = OUTPUTS[output].writer
    if name is None:
        raise ValueError(f"{output} is drawn by its command: attnviz has no writer for it")
    writer: Callable[[AttentionMaps, Output, Rendering, int], Iterator[Piece]]
    writer = globals()[name]
    return writer(maps, output, how, number)


def write(
    stream: Iterable[AttentionMaps],
    output: Output,
    destination: str | Path,
    how: Rendering | None = None,
) -> int:
    """Write every input's maps as ``output`` to ``destination`` (a file or ``-``);
    return how many were written.

    Outputs that hold one input (json, npz, a picture, the page) refuse a second before
    writing anything; ndjson and csv write each input's records as soon as its maps are
    made, so an input that fails ends the stream between whole records. Text is written
    a row of weights at a time: its memory is the maps' own, not the text's.
    """
    how = how or Rendering()
    if OUTPUTS[output].records:
        return _write_records(stream, output, destination, how)
    items = iter(stream)
    first = next(items)
    if next(items, None) is not None:
        if OUTPUTS[output].kind is Kind.DATA:
            raise UsageError(
                f"several inputs: {output.value} holds one; use --format "
                + formats_named(output for output, spec in OUTPUTS.items() if spec.records)
            )
        raise UsageError(f"this command reads one input, but several were given: {ONE_TEXT}")
    _check_one_file(first, output, how)
    ((_, write_file),) = pieces(first, output, how)
    with open_output(destination, binary=True) as out:
        write_file(out)
    return 1


def _write_records(
    stream: Iterable[AttentionMaps], output: Output, destination: str | Path, how: Rendering
) -> int:
    count = 0
    with open_output(destination, binary=True) as out:
        out.write(HEADERS.get(output, "").encode("utf-8"))
        for count, maps in enumerate(stream, start=1):
            for _, write_record in pieces(maps, output, how, count - 1):
                write_record(out)
            out.flush()
    return count


def _check_one_file(maps: AttentionMaps, output: Output, how: Rendering) -> None:
    """A picture's head view draws one map and its layer view one layer: one file."""
    if OUTPUTS[output].kind is not Kind.PICTURE:
        return
    layer_count, head_count = maps.weights.shape[:2]
    map_count = layer_count * head_count
    panels = how.panels(maps)
    if panels is not None:
        layer_count, map_count = len({panel.layer for panel in panels}), len(panels)
    if how.view is View.HEAD and map_count != 1:
        raise UsageError(
            f"--view head draws one map, but {map_count} are selected: pick one with --layer "
            "and --head (or --top-heads 1), or use --view layer or model"
        )
    if how.view is View.LAYER and layer_count != 1:
        raise UsageError(
            f"--view layer draws one layer, but {layer_count} are selected: pick one with --layer"
        )


def write_table(
    output: Output,
    rows: list[dict[str, object]],
    columns: list[str],
    destination: str | Path,
    fields: dict[str, object] | None = None,
    key: str = "heads",
) -> None:
    """A command's table of rows (heads, stats) as data: json, a document holding the
    ``fields`` and the rows under ``key``; csv (an output with a delimiter), a line per
    row."""
    # numpy: only where this format is written (the writers themselves are light)
    from attnviz.data_formats import dump_csv, dump_json

    delimiter = OUTPUTS[output].delimiter
    if output is Output.JSON:
        content = dump_json(envelope({**(fields or {}), key: rows}))
    elif delimiter is not None:
        content = dump_csv(rows, columns, delimiter)
    else:
        raise ValueError(f"a table is written as json or csv, not {output}")
    with open_output(destination, binary=True) as out:
        out.write(content.encode("utf-8"))
