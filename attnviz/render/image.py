"""Pictures of attention maps with matplotlib (Agg): PNG, SVG and PDF.

Three views: one head (a heatmap with labelled rows and columns, a colour bar
and a title), one layer (its heads in a grid) and the model (every layer ×
head as small multiples).

Single-head PNGs are what batches produce by the thousand, so they have a fast
path: a :class:`HeadCanvas` is built once per map shape, with matplotlib
drawing the frame and colour bar; for each map it restores that background,
draws the token labels (once per input), paints the cells straight into the
pixel buffer from a colour lookup table and draws the title. The picture is
the one matplotlib would draw; only the work of re-laying it out is skipped.

Colours run from 0 to 1 in every picture, so pictures can be compared; for
long inputs, where every weight is small, ``vmax`` lowers the top of the scale.
Output is reproducible: no timestamps in PNG, SVG or PDF metadata.
"""

from __future__ import annotations

import io
import math
import re
import struct
import warnings
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Output, View
from attnviz.errors import UsageError, warn
from attnviz.tokens import display_label

if TYPE_CHECKING:
    from attnviz.analysis.corpus import CorpusStatistics
    from attnviz.maps import AttentionMaps, MapPanel

MAX_LABEL = 14  # characters of a token label before it is cut with an ellipsis
VALUES_UP_TO = 16  # --values prints numbers in maps with at most this many rows and columns
_INCH = 72  # points
_MARGIN_LEFT = 1.15  # inches, room for query labels
_MARGIN_BOTTOM = 1.15  # room for key labels, written upwards
_MARGIN_TOP = 0.65  # the header (model and mode) and the title (layer and head)
_MARGIN_RIGHT = 1.0  # the colour bar
_NOTE_ROOM = 0.35  # under the key labels, for the note of a picture in a given size
_GRID_COLUMNS = 6  # heads per row when one layer's heads (or chosen heads) wrap
MIN_LABEL_POINTS = 6.0  # token labels are never smaller: they are thinned instead
_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font")


def check_colormap(name: str) -> None:
    import matplotlib

    if name not in matplotlib.colormaps:
        raise UsageError(
            f"unknown colormap {name!r}: try viridis, magma, Blues, Greys (any matplotlib name)"
        )


def _label(token: str) -> str:
    label = display_label(token)
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"


# Settings for every drawing, applied with rc_context so that no global state changes:
# stable ids inside SVG files; PDF streams compressed, with TrueType (Type 42)
# fonts, since the Type 3 fonts matplotlib embeds by default fail the checks of
# IEEE and ACM submission systems.
# Each map is its own image in SVG and PDF, not all resampled into one.
_RC = {
    "svg.hashsalt": "attnviz",
    "pdf.compression": 6,
    "pdf.fonttype": 42,
    "image.composite_image": False,
}


@contextmanager
def _drawing(missing_glyphs: set[str]) -> Iterator[None]:
    """Draw with attnviz's settings, collecting into ``missing_glyphs`` the characters no
    font has (matplotlib warns once per glyph; they are drawn as boxes and the picture
    is still written). The font manager's log stays quiet meanwhile."""
    import logging

    import matplotlib

    font_log = logging.getLogger("matplotlib.font_manager")
    level = font_log.level
    font_log.setLevel(logging.ERROR)
    try:
        with (
            matplotlib.rc_context(_RC),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            yield
    finally:
        font_log.setLevel(level)
    missing_glyphs.update(
        chr(int(match.group(1)))
        for caught_warning in caught
        if (match := _MISSING_GLYPH.search(str(caught_warning.message)))
    )


def _warn_missing(missing: set[str]) -> None:
    shown = "".join(sorted(missing)[:20]) + ("…" if len(missing) > 20 else "")
    warn(
        f"no installed font has {len(missing)} of the characters ({shown}); they are drawn "
        "as boxes. Install a font that covers them, such as Noto Sans CJK or Noto Color Emoji."
    )


@dataclass(frozen=True)
class Frame:
    """What all maps of one input share: the header line and the token labels."""

    header: str
    query_labels: tuple[str, ...]
    key_labels: tuple[str, ...]


@dataclass(frozen=True)
class Style:
    cmap: str = "viridis"
    dpi: int = 100
    values: bool = False  # weights printed in the cells of small maps
    vmax: float = 1.0  # the weight at the top of the colour scale; lower it for long inputs
    figsize: tuple[float, float] | None = None  # inches; None: sized by the map
    font_size: float | None = None  # points for labels and titles; None: as the cells allow
    title: str | None = None  # the figure's title; None: the model and mode; "": no titles

    def __post_init__(self) -> None:  # what the command line's options hold to as well
        if not 0 < self.vmax <= 1:
            raise UsageError(f"vmax {self.vmax} is outside the weights' range: give 0 < vmax <= 1")
        if self.dpi <= 0 or (self.font_size is not None and self.font_size <= 0):
            raise UsageError("dpi and font_size are positive numbers")
        if self.figsize is not None and not all(0 < size <= 100 for size in self.figsize):
            raise UsageError(f"figsize {self.figsize}: two sizes in inches, each up to 100")

    def titles(self, default: str) -> str:
        return default if self.title is None else self.title

    @property
    def clips(self) -> bool:
        """Weights above vmax are drawn in the top colour: the colour bar says so."""
        return self.vmax < 1.0


def encode_png(rgba: np.ndarray) -> bytes:
    """A truecolour PNG of an (H, W, 4) uint8 buffer, alpha dropped.

    Written here rather than by Pillow, which tries all five row filters on
    every row: a heatmap is flat colour, compresses as well unfiltered, and
    this takes a third of the time (1 ms instead of 3.5 for a 400 × 400 map).
    """
    height, width = rgba.shape[:2]
    rows = np.empty((height, 1 + 3 * width), dtype=np.uint8)
    rows[:, 0] = 0  # filter type 0, "none", for every row
    rows[:, 1:].reshape(height, width, 3)[:] = rgba[..., :3]  # one copy, straight into place

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            chunk(b"IHDR", header),
            chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)),
            chunk(b"IEND", b""),
        )
    )


def _cell_inches(count: int) -> float:
    """Cells shrink as maps grow, so that a picture stays within about ten inches."""
    return float(np.clip(10.0 / max(count, 1), 0.01, 0.4))


def _label_step(
    cell_points: float, wanted: float | None = None, largest: float = 9.0
) -> tuple[float, int]:
    """Font size for token labels and the step between labels shown: every label when
    the cells are tall enough for the size, else every ``step``-th. Never below
    MIN_LABEL_POINTS."""
    room = cell_points * 0.8
    size = max(MIN_LABEL_POINTS, wanted if wanted is not None else min(largest, room))
    return size, max(1, int(np.ceil(size / max(room, 0.1) - 1e-9)))


def _fit_text(text: Any, renderer: Any, room: float, largest: float, cut: bool = True) -> bool:
    """Shrink ``text`` until it is at most ``room`` pixels wide, down to the smallest
    size labels take; past that, cut it in the middle with an ellipsis (if ``cut``).
    Whether it fitted whole."""
    size = largest
    text.set_fontsize(size)
    while text.get_window_extent(renderer).width > room and size > MIN_LABEL_POINTS:
        size -= 0.5
        text.set_fontsize(size)
    if text.get_window_extent(renderer).width <= room:
        return True
    whole = text.get_text()
    keep = len(whole)
    while text.get_window_extent(renderer).width > room and keep > 8:
        keep -= 2
        head = keep // 2
        text.set_text(whole[:head] + "…" + whole[len(whole) - (keep - head) :])
    return False


def _short_title(title: str) -> str:
    """``layer 2 · head 0`` -> ``L2 H0``: the title of a panel too narrow for the long one."""
    title = re.sub(r"\blayers? (?=-?\d)", "L", title)
    return re.sub(r"\bheads? (?=-?\d)", "H", title).replace(" · ", " ")


def _head_margins(style: Style, label_chars: int) -> tuple[float, float]:
    """Inches left of and below a map's cells, for its token labels (and under them the
    note). By default room for the longest label any input may have, so that one canvas
    serves every input of a shape; in a given figure size (a paper's), room for the
    labels of this input, so that the cells get the rest."""
    if style.figsize is None:
        return _MARGIN_LEFT, _MARGIN_BOTTOM
    labels = 0.12 + min(label_chars, MAX_LABEL) * (style.font_size or 9.0) * 0.62 / _INCH
    return labels, labels + _NOTE_ROOM


def _axes_note(step: int) -> str:
    note = "rows: query tokens\ncolumns: key tokens"
    if step > 1:
        note += f"\nlabels: one token in {step}"
    return note


def _metadata(picture: Output) -> dict[str, Any]:
    # Dates make two runs on the same input differ: leave them out.
    return {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}[
        picture
    ]


class HeadCanvas:
    """A reusable single-head figure for maps of one shape (query tokens × key tokens)."""

    def __init__(self, queries: int, keys: int, style: Style, label_chars: int = MAX_LABEL) -> None:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.queries, self.keys, self.style = queries, keys, style
        self.missing_glyphs: set[str] = set()  # characters no font had, in any drawing
        width, height = style.figsize or self.figure_size(queries, keys)
        left, bottom = _head_margins(style, label_chars)
        cell = self.cell_inches(queries, keys, style, (left, bottom))
        # A given size that the cells cannot fill at their aspect: the map in the middle.
        left += max(0.0, width - left - keys * cell - _MARGIN_RIGHT) / 2
        bottom += max(0.0, height - bottom - queries * cell - _MARGIN_TOP) / 2
        text_size = style.font_size or 9.0
        self.figure = Figure(figsize=(width, height), dpi=style.dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        box = (left / width, bottom / height, keys * cell / width, queries * cell / height)
        self.axes = self.figure.add_axes(box)
        self.cmap = matplotlib.colormaps[style.cmap]
        self.image = self.axes.imshow(
            np.zeros((queries, keys)),
            cmap=self.cmap,
            vmin=0.0,
            vmax=style.vmax,
            interpolation="nearest",
            aspect="auto",
            animated=True,
        )
        self.axes.set_xticks([])
        self.axes.set_yticks([])
        # Beside the grid and as tall as it, whatever the figure's size.
        colour_bar = self.figure.add_axes(
            ((left + keys * cell + 0.2) / width, box[1], 0.15 / width, box[3])
        )
        bar = self.figure.colorbar(
            self.image, cax=colour_bar, extend="max" if style.clips else "neither"
        )
        bar.set_label(_bar_label(style), fontsize=max(MIN_LABEL_POINTS, text_size - 1))
        colour_bar.tick_params(labelsize=max(MIN_LABEL_POINTS, text_size - 2))
        size, step = _label_step(cell * _INCH, style.font_size)
        # Just under the grid's corner, in the room the query labels leave: not adrift at
        # the bottom of a figure whose margin is sized for the longest key labels. Margins
        # sized for this input's labels leave no such room: then under the key labels.
        corner = bottom - 0.08 if style.figsize is None else _NOTE_ROOM - 0.03
        self.figure.text(
            0.05 / width,
            corner / height,
            _axes_note(step),
            fontsize=MIN_LABEL_POINTS,
            va="top",
            ha="left",
        )
        self.key_labels = [
            self.axes.text(
                k,
                queries - 0.5 + 0.15,
                "",
                rotation=90,
                ha="center",
                va="top",
                fontsize=size,
                animated=True,
                transform=self.axes.transData,
            )
            for k in range(0, keys, step)
        ]
        self.query_labels = [
            self.axes.text(
                -0.5 - 0.15,
                q,
                "",
                ha="right",
                va="center",
                fontsize=size,
                animated=True,
                transform=self.axes.transData,
            )
            for q in range(0, queries, step)
        ]
        self.label_step = step
        self.header = self.figure.text(
            0.5, 1 - 0.12 / height, "", ha="center", va="top", fontsize=text_size, animated=True
        )
        self.title = self.axes.set_title("", fontsize=text_size, animated=True)
        self.values: list[Any] = []
        if style.values and max(queries, keys) <= VALUES_UP_TO:
            self.values = [
                self.axes.text(
                    k, q, "", ha="center", va="center", fontsize=min(size, 7), animated=True
                )
                for q in range(queries)
                for k in range(keys)
            ]
        with _drawing(self.missing_glyphs):
            self.canvas.draw()
        self.blank = self.canvas.copy_from_bbox(self.figure.bbox)
        self.framed: Any = None  # the background with one input's frame drawn on it
        self.frame_drawn: Frame | None = None
        self.titles: dict[str, np.ndarray] = {}  # title -> its band of pixels, once drawn
        self.title_rows: slice | None = None
        pixels = np.asarray(self.canvas.buffer_rgba())
        extent = self.axes.get_window_extent()
        rows = pixels.shape[0]
        self.x = np.rint(np.linspace(extent.x0, extent.x1, keys + 1)).astype(int)
        self.y = np.rint(np.linspace(rows - extent.y1, rows - extent.y0, queries + 1)).astype(int)
        self.lookup = np.rint(self.cmap(np.linspace(0, 1, 256)) * 255).astype(np.uint8)

    @staticmethod
    def cell_inches(queries: int, keys: int, style: Style, margins: tuple[float, float]) -> float:
        """The side of a cell: by the map's size, or what a given figure size leaves
        beside the ``margins`` for the labels (left, bottom)."""
        if style.figsize is None:
            return _cell_inches(max(queries, keys))
        width, height = style.figsize
        left, bottom = margins
        cell = min(
            (width - left - _MARGIN_RIGHT) / keys,
            (height - _MARGIN_TOP - bottom) / queries,
        )
        if cell <= 0:
            smallest = (left + _MARGIN_RIGHT + 1, _MARGIN_TOP + bottom + 1)
            raise UsageError(
                f"--figsize {width:g},{height:g} leaves no room for the map after its labels "
                f"and colour bar: give at least {smallest[0]:.1f},{smallest[1]:.1f}"
            )
        return cell

    @staticmethod
    def figure_size(queries: int, keys: int) -> tuple[float, float]:
        """Width and height in inches: fixed margins around cells that shrink as maps grow."""
        cell = _cell_inches(max(queries, keys))
        return (
            _MARGIN_LEFT + keys * cell + _MARGIN_RIGHT,
            _MARGIN_TOP + queries * cell + _MARGIN_BOTTOM,
        )

    def _set_frame(self, frame: Frame) -> list[Any]:
        """Put one input's header and labels on their artists; return those artists."""
        step = self.label_step
        self.header.set_text(frame.header)
        # A short map's figure is narrow, and a model name (builtin:layers=…) is long.
        room = self.figure.bbox.width * 0.96
        _fit_text(self.header, self.canvas.get_renderer(), room, self.style.font_size or 9.0)
        for artist, label in zip(self.key_labels, frame.key_labels[::step], strict=True):
            artist.set_text(_label(label))
        for artist, label in zip(self.query_labels, frame.query_labels[::step], strict=True):
            artist.set_text(_label(label))
        return [self.header, *self.key_labels, *self.query_labels]

    def _set_cells(self, matrix: np.ndarray, title: str) -> None:
        self.image.set_data(matrix)
        self.title.set_text(title)
        for artist, weight in zip(self.values, matrix.ravel(), strict=False):
            artist.set_text(f"{weight:.2f}".lstrip("0") if weight < 1 else "1.0")
            artist.set_color("black" if weight / self.style.vmax > 0.6 else "white")

    def png(self, matrix: np.ndarray, frame: Frame, title: str) -> bytes:
        """The picture of one map as PNG bytes, by the fast path."""
        if frame != self.frame_drawn:  # a new input: draw its frame once, for all its maps
            self.canvas.restore_region(self.blank)
            with _drawing(self.missing_glyphs):
                for artist in self._set_frame(frame):
                    self.figure.draw_artist(artist)
            self.framed = self.canvas.copy_from_bbox(self.figure.bbox)
            self.frame_drawn = frame
        else:
            self.canvas.restore_region(self.framed)
        self._set_cells(matrix, title)
        pixels = np.asarray(self.canvas.buffer_rgba())
        shades = np.clip(np.rint(matrix * (255 / self.style.vmax)), 0, 255).astype(np.intp)
        cells = self.lookup[shades]  # (T, S, 4)
        block = np.repeat(np.repeat(cells, np.diff(self.y), axis=0), np.diff(self.x), axis=1)
        pixels[self.y[0] : self.y[-1], self.x[0] : self.x[-1]] = block
        with _drawing(self.missing_glyphs):
            self._draw_title(title, pixels)
            for artist in self.values:
                self.figure.draw_artist(artist)
        return encode_png(pixels)

    def _draw_title(self, title: str, pixels: np.ndarray) -> None:
        """Draw the title, or paste it: a batch draws the same few titles thousands of times."""
        if title in self.titles:
            pixels[self.title_rows] = self.titles[title]
            return
        self.figure.draw_artist(self.title)
        if self.title_rows is None:
            rows = pixels.shape[0]
            title = self.title.get_window_extent()
            top, bottom = int(rows - title.y1) - 2, int(np.ceil(rows - title.y0)) + 2
            header = self.header.get_window_extent()
            if not (rows - header.y0 < top and bottom <= self.y[0]):
                return  # the band is not the title's alone: draw every time
            self.title_rows = slice(top, bottom)
        self.titles[self.title.get_text()] = pixels[self.title_rows].copy()

    def vector(self, matrix: np.ndarray, frame: Frame, title: str, picture: Output) -> bytes:
        """The same picture drawn whole by matplotlib, for SVG and PDF."""
        self.frame_drawn = None  # the raster background no longer matches the artists
        animated = [self.image, self.title, *self._set_frame(frame), *self.values]
        self._set_cells(matrix, title)
        for artist in animated:
            artist.set_animated(False)
        try:
            out = io.BytesIO()
            with _drawing(self.missing_glyphs):
                self.figure.savefig(out, format=picture.value, metadata=_metadata(picture))
            return out.getvalue()
        finally:
            for artist in animated:
                artist.set_animated(True)


class Painter:
    """Draws pictures of maps, keeping a canvas per map shape and style: a batch draws
    thousands of maps of a few shapes, and laying out a canvas is the slow part.

    Whoever renders owns a painter (a command, a batch worker); nothing is kept
    between painters.
    """

    def __init__(self, max_canvases: int = 64) -> None:
        self.max_canvases = max_canvases
        self.canvases: dict[tuple[int, int, Style, int], HeadCanvas] = {}
        self.grids: dict[tuple[GridShape, Style], GridCanvas] = {}
        self.missing_glyphs: set[str] = set()  # drawn as boxes by the grid views
        self.reported: set[str] = set()  # missing characters already warned about, once each
        self.told_values_too_large = False  # --values for a map too large: warned once

    def head_canvas(
        self, queries: int, keys: int, style: Style, label_chars: int = MAX_LABEL
    ) -> HeadCanvas:
        key = (queries, keys, style, label_chars)
        if key not in self.canvases:
            if len(self.canvases) >= self.max_canvases:  # forget the oldest, not grow
                self.canvases.pop(next(iter(self.canvases)))
            self.canvases[key] = HeadCanvas(queries, keys, style, label_chars)
        return self.canvases[key]

    def grid_picture(
        self,
        maps: AttentionMaps,
        picture: Output,
        style: Style,
        panels: Sequence[MapPanel] | None = None,
    ) -> bytes:
        """The maps (or the chosen ``panels``) as small multiples: a row per layer, a column
        per head; a single layer's heads, and chosen panels, wrap into rows of six."""
        shown = list(maps.panels()) if panels is None else list(panels)
        key = (grid_shape(maps, panels), style)
        if key not in self.grids:
            if len(self.grids) >= self.max_canvases:
                self.grids.pop(next(iter(self.grids)))
            self.grids[key] = GridCanvas(*key)
        canvas = self.grids[key]
        if picture is Output.PNG:
            return canvas.png(maps, shown)
        return canvas.vector(maps, shown, picture)

    def head_picture(
        self, maps: AttentionMaps, panel: MapPanel, picture: Output, style: Style
    ) -> bytes:
        """One map of ``maps`` as picture bytes."""
        frame = Frame(
            header=style.titles(f"{maps.model} · {maps.mode} attention{maps.context()}"),
            query_labels=tuple(maps.query_labels()),
            key_labels=tuple(maps.key_tokens),
        )
        label_chars = MAX_LABEL  # the margins of a given size fit this input's labels
        if style.figsize is not None:
            labels = (*frame.query_labels, *frame.key_labels)
            label_chars = max((len(_label(label)) for label in labels), default=1)
        queries, keys = len(frame.query_labels), len(frame.key_labels)
        if style.values and max(queries, keys) > VALUES_UP_TO and not self.told_values_too_large:
            warn(
                f"--values: a {queries} × {keys} map is drawn without numbers; they fit maps "
                f"up to {VALUES_UP_TO} × {VALUES_UP_TO}"
            )
            self.told_values_too_large = True
        canvas = self.head_canvas(queries, keys, style, label_chars)
        title = "" if style.title == "" else panel.title
        if picture is Output.PNG:
            return canvas.png(panel.matrix, frame, title)
        return canvas.vector(panel.matrix, frame, title, picture)

    def files(
        self,
        maps: AttentionMaps,
        view: View,
        picture: Output,
        style: Style,
        panels: Sequence[MapPanel] | None = None,
    ) -> Iterator[tuple[str, bytes]]:
        """The pictures of one input for a view: (name suffix, bytes) pairs.

        head: one per map, suffix ``-L{layer}-H{head}``; layer: one per layer,
        ``-L{layer}``; model: one in all, no suffix. ``panels`` draws only those
        maps, in that order (the heads worth looking at first).
        """
        if panels is None:
            yield from self._pictures(maps, view, picture, style)
        else:
            yield from self._chosen(maps, view, picture, style, panels)
        missing = set(self.missing_glyphs).union(
            *(canvas.missing_glyphs for canvas in self.canvases.values()),
            *(canvas.missing_glyphs for canvas in self.grids.values()),
        )
        if missing - self.reported:  # one warning line per character, however many inputs
            _warn_missing(missing - self.reported)
            self.reported |= missing

    def _chosen(
        self,
        maps: AttentionMaps,
        view: View,
        picture: Output,
        style: Style,
        panels: Sequence[MapPanel],
    ) -> Iterator[tuple[str, bytes]]:
        if view is View.MODEL:
            yield "", self.grid_picture(maps, picture, style, panels)
        elif view is View.LAYER:
            for layer in dict.fromkeys(panel.layer for panel in panels):
                own = [panel for panel in panels if panel.layer == layer]
                yield f"-L{layer}", self.grid_picture(maps, picture, style, own)
        else:
            for panel in panels:
                suffix = f"-L{panel.layer}-H{panel.head}"
                yield suffix, self.head_picture(maps, panel, picture, style)

    def _pictures(
        self, maps: AttentionMaps, view: View, picture: Output, style: Style
    ) -> Iterator[tuple[str, bytes]]:
        layer_count = maps.weights.shape[0]
        if view is View.MODEL:
            yield "", self.grid_picture(maps, picture, style)
            return
        if view is View.LAYER:
            for i in range(layer_count):
                layer = maps.layers[i] if layer_count == len(maps.layers) else None
                part = maps.replace(
                    weights=maps.weights[i : i + 1],
                    layers=[layer] if layer is not None else maps.layers,
                )
                suffix = f"-L{layer}" if layer is not None else ""
                yield suffix, self.grid_picture(part, picture, style)
            return
        for panel in maps.panels():
            suffix = "".join(
                f"-{letter}{index}"
                for letter, index in (("L", panel.layer), ("H", panel.head))
                if index is not None
            )
            yield suffix, self.head_picture(maps, panel, picture, style)


@dataclass(frozen=True)
class Picture:
    """A picture's bytes: a notebook shows a PNG or an SVG picture inline."""

    data: bytes
    format: Output

    def __repr__(self) -> str:
        """Its kind and size: a notebook prints this beside the picture, not its bytes."""
        return f"<Picture {self.format.value}, {len(self.data):,} bytes>"

    def _repr_png_(self) -> bytes | None:
        return self.data if self.format is Output.PNG else None

    def _repr_svg_(self) -> str | None:
        return self.data.decode() if self.format is Output.SVG else None


def one_picture(maps: AttentionMaps, view: View, picture: Output, style: Style) -> bytes:
    """The one picture of ``maps`` that ``view`` draws: the model view of any maps, the
    layer view of one layer's, the head view of one map."""
    layers, heads = maps.map_grid
    if view is View.HEAD and layers * heads != 1:
        raise UsageError(
            f"the head view draws one map, but these maps hold {layers * heads}: "
            "give a layer and a head"
        )
    if view is View.LAYER and layers != 1:
        raise UsageError(f"the layer view draws one layer, but these maps hold {layers}")
    ((_, data),) = Painter().files(maps, view, picture, style)
    return data


@dataclass(frozen=True)
class GridShape:
    """What a grid picture's layout depends on: one canvas serves every input alike."""

    rows: int  # panels down
    columns: int  # panels across
    queries: int
    keys: int
    label_chars: int  # the longest label, capped: the room kept for labels
    count: int  # the panels drawn (a last row may be short)
    # Every layer × head of several layers: "head H" over the columns and "layer L"
    # beside the rows, as a paper's figure is labelled, not a title on every panel.
    headers: bool = False


def grid_shape(maps: AttentionMaps, panels: Sequence[MapPanel] | None) -> GridShape:
    count = len(panels) if panels is not None else maps.weights.shape[0] * maps.weights.shape[1]
    rows, columns = maps.weights.shape[:2] if panels is None else (1, count)
    headers = panels is None and maps.aggregate is None and rows > 1  # a row per layer
    if rows == 1 and columns > _GRID_COLUMNS:
        rows, columns = -(-columns // _GRID_COLUMNS), _GRID_COLUMNS
    labels = [*maps.query_labels(), *maps.key_tokens]
    longest = max((len(_label(token)) for token in labels), default=1)
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    return GridShape(rows, columns, queries, keys, longest, count, headers)


class GridCanvas:
    """Small multiples, laid out once per shape and style: every panel is a rectangle of
    cells on one borderless board (no Axes, ticks or layout engine per panel, which is
    what made matplotlib's own grid slow).

    PNGs take the fast path: the frame (colour bar, panel borders) is drawn once; per
    input the labels and titles are drawn; per picture each panel's cells are painted
    into the pixel buffer from the colormap's lookup table. SVG and PDF are the same
    figure drawn whole by matplotlib, which a test holds the fast path to.
    """

    def __init__(self, shape: GridShape, style: Style) -> None:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle

        self.shape, self.style = shape, style
        self.missing_glyphs: set[str] = set()
        queries, keys = shape.queries, shape.keys
        # Down to a pixel or so per token: a 300-token model view stays a few megapixels.
        cell = float(np.clip(2.2 / max(queries, keys), 0.01, 0.25))
        label_size, _ = _label_step(cell * _INCH, style.font_size, largest=7.0)
        label_room = 0.08 + min(shape.label_chars, MAX_LABEL) * label_size * 0.62 / _INCH
        title_room = 0.1 + (style.font_size or 7.0) * 1.5 / _INCH
        # Titles over every row of panels, or column headers once and row headers left.
        row_titles, once = (0.0, title_room) if shape.headers else (title_room, 0.0)
        left = 0.2 + (0.05 + (style.font_size or 7.0) * 1.5 / _INCH if shape.headers else 0.0)
        # Inches: between panels, above them for the header, right for the colour bar, and
        # below the key labels for the note.
        header_size = (style.font_size or 9.0) + 1
        gap, top, right, bottom = 0.15, 0.2 + header_size * 1.4 / _INCH, 1.1, 0.2
        if style.figsize is not None:  # the cells take what the given size leaves
            width, height = style.figsize
            across = (width - left - label_room - right) / shape.columns - gap
            down = (height - top - once - bottom - label_room) / shape.rows - row_titles - gap
            cell = min(across / keys, down / queries)
            if cell <= 0:
                raise UsageError(
                    f"--figsize {width:g},{height:g} is too small for {shape.rows} × "
                    f"{shape.columns} maps and their labels: give a larger size"
                )
        label_size, step = _label_step(cell * _INCH, style.font_size, largest=7.0)
        self.step = step
        # Panels a whole number of pixels apart: one panel's labels, drawn once, are then
        # pixel for pixel what matplotlib would draw at every other panel. Labels take
        # room only left of the first column and under the last row, as shared axes do.
        dpi = style.dpi
        panel_width = math.ceil((keys * cell + gap) * dpi) / dpi
        panel_height = math.ceil((row_titles + queries * cell + gap) * dpi) / dpi
        self.panel_pixels = (round(panel_width * dpi), round(panel_height * dpi))
        width, height = style.figsize or (
            left + label_room + shape.columns * panel_width + right,
            top + once + shape.rows * panel_height + label_room + bottom,
        )
        height = math.ceil(height * dpi) / dpi  # the top edge on a pixel: panels from there
        # A given size that the cells cannot fill at their aspect: the grid in the middle.
        grid_width, grid_height = shape.columns * panel_width, shape.rows * panel_height
        spare_x = max(0.0, width - (left + label_room + grid_width + right)) / 2
        spare_y = max(0.0, height - (top + once + grid_height + label_room + bottom)) / 2
        self.label_room = label_room
        # Labels taller than their cells reach past the cells' ends by about half their
        # size: pasted labels carry that much more, never more than half the gap.
        half_label = math.ceil(label_size / _INCH * dpi * 0.6) + 2
        self.label_overhang = min(half_label, int(gap * dpi / 2) - 1)
        self.figure = Figure(figsize=(width, height), dpi=style.dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        board = self.figure.add_axes((0, 0, 1, 1))
        board.set_axis_off()
        board.set_xlim(0, width)
        board.set_ylim(0, height)
        board.set_autoscale_on(False)
        self.cmap = matplotlib.colormaps[style.cmap]
        self.lookup = np.rint(self.cmap(np.linspace(0, 1, 256)) * 255).astype(np.uint8)
        title_size = style.font_size or 7.0
        self.boxes: list[tuple[float, float, float, float]] = []  # x0, x1, y0, y1 (inches)
        self.images, self.titles, self.labels = [], [], []
        left_edge = round((left + label_room + spare_x) * dpi) / dpi
        top_edge = round((height - top - spare_y - title_room) * dpi) / dpi
        self.title_fits = self.panel_pixels[0] - 4  # pixels: a title over its own panel only
        self.fitted: dict[tuple[str, ...], tuple[list[str], float]] = {}  # titles as they fit
        for n in range(shape.rows * shape.columns):
            row, column = divmod(n, shape.columns)
            x0 = left_edge + column * panel_width
            y1 = top_edge - row * panel_height
            x1, y0 = x0 + keys * cell, y1 - queries * cell
            self.boxes.append((x0, x1, y0, y1))
            image = board.imshow(
                np.zeros((queries, keys)),
                cmap=self.cmap,
                vmin=0.0,
                vmax=style.vmax,
                interpolation="none",  # SVG and PDF embed the cells, not a resampling
                aspect="auto",
                extent=(x0, x1, y0, y1),
                animated=True,
            )
            self.images.append(image)
            board.add_patch(
                Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, linewidth=0.5, color="0.6")
            )
            self.titles.append(
                board.text((x0 + x1) / 2, y1 + 0.04, "", ha="center", va="bottom",
                           fontsize=title_size, animated=True)
            )  # fmt: skip
            # As in a grid of shared axes: query labels left of each row of panels, key
            # labels under the bottom panel of each column.
            rows_ = [
                board.text(x0 - 0.03, y1 - (q + 0.5) * cell, "", ha="right", va="center",
                           fontsize=label_size, animated=True)
                for q in range(0, queries, step)
            ] if self._labels_rows(n) else []  # fmt: skip
            columns_ = [
                board.text(x0 + (k + 0.5) * cell, y0 - 0.03, "", ha="center", va="top",
                           rotation=90, fontsize=label_size, animated=True)
                for k in range(0, keys, step)
            ] if self._labels_columns(n) else []  # fmt: skip
            self.labels.append((rows_, columns_))
        self.row_headers = [
            board.text(left_edge - label_room - 0.05, top_edge - row * panel_height
                       - queries * cell / 2, "", ha="right", va="center", rotation=90,
                       fontsize=title_size, animated=True)
            for row in range(shape.rows if shape.headers else 0)
        ]  # fmt: skip
        self.row_fits = queries * cell * dpi  # pixels: a row header beside its own row
        self.header = self.figure.text(
            0.5, 1 - 0.1 / height, "", ha="center", va="top",
            fontsize=header_size, animated=True,
        )  # fmt: skip
        if step > 1:
            self.figure.text(
                0.005, 0.005, _axes_note(step).splitlines()[-1], fontsize=MIN_LABEL_POINTS
            )
        # Beside the grid and as tall as its cells, or as its label if that is longer.
        cells_bottom = top_edge - (shape.rows - 1) * panel_height - queries * cell
        label_length = len(_bar_label(style)) * max(MIN_LABEL_POINTS, title_size) * 0.62 / _INCH
        bar_height = max(top_edge - cells_bottom, label_length)
        bar_bottom = (top_edge + cells_bottom - bar_height) / 2
        bar_axes = self.figure.add_axes(
            (
                (left_edge + grid_width + 0.1) / width,
                bar_bottom / height,
                0.15 / width,
                bar_height / height,
            )
        )
        mappable = ScalarMappable(Normalize(0.0, style.vmax), self.cmap)
        bar = self.figure.colorbar(
            mappable, cax=bar_axes, extend="max" if style.clips else "neither"
        )
        bar.set_label(_bar_label(style), fontsize=max(MIN_LABEL_POINTS, title_size))
        bar_axes.tick_params(labelsize=max(MIN_LABEL_POINTS, title_size - 1))
        with _drawing(self.missing_glyphs):
            self.canvas.draw()
        self.blank = self.canvas.copy_from_bbox(self.figure.bbox)
        self.framed: Any = None
        self.frame_drawn: tuple | None = None
        rows = int(self.figure.bbox.height)
        transform = board.transData
        self.pixels_of: list[tuple[np.ndarray, np.ndarray]] = []
        for x0, x1, y0, y1 in self.boxes:
            (left, bottom), (right_, top_) = transform.transform([(x0, y0), (x1, y1)])
            xs = np.rint(np.linspace(left, right_, keys + 1)).astype(int)
            ys = np.rint(np.linspace(rows - top_, rows - bottom, queries + 1)).astype(int)
            self.pixels_of.append((xs, ys))

    def _set_frame(self, maps: AttentionMaps, panels: Sequence[MapPanel]) -> list[Any]:
        """Put one input's header, titles and labels on their artists; return them all."""
        style = self.style
        self.header.set_text(style.titles(f"{maps.model} · {maps.mode} attention{maps.context()}"))
        queries = [_label(token) for token in maps.query_labels()][:: self.step]
        keys = [_label(token) for token in maps.key_tokens][:: self.step]
        shown = len(panels) > 1 or style.title != ""
        if self.shape.headers:  # "head H" over the first row; "layer L" beside each row
            columns = self.shape.columns
            titles, size = self._fitted_titles(
                tuple(f"head {panel.head}" for panel in panels[:columns])
            )
            for artist, panel in zip(self.row_headers, panels[::columns], strict=False):
                row_header = f"layer {panel.layer}"
                artist.set_text(row_header)
                artist.set_fontsize(size)
                if artist.get_window_extent(self.canvas.get_renderer()).height > self.row_fits:
                    artist.set_text(_short_title(row_header))
        else:
            titles, size = self._fitted_titles(
                tuple(panel.title for panel in panels) if shown else ()
            )
        drawn: list[Any] = [self.header, *self.row_headers]
        for n, (title, (rows, columns)) in enumerate(zip(self.titles, self.labels, strict=True)):
            used = n < len(panels)
            title.set_text(titles[n] if n < len(titles) else "")
            title.set_fontsize(size)
            for artist, label in zip(rows, queries if rows else [], strict=True):
                artist.set_text(label if used else "")
            for artist, label in zip(columns, keys if columns else [], strict=True):
                artist.set_text(label if used else "")
            drawn += [title, *rows, *columns]
        return drawn

    def _fitted_titles(self, titles: tuple[str, ...]) -> tuple[list[str], float]:
        """The panels' titles as they fit over panels narrower than them: all in one
        smaller size, or all in their short form (L2 H0), cut only past that."""
        if titles not in self.fitted:
            artist, renderer = self.titles[0], self.canvas.get_renderer()
            largest = self.style.font_size or 7.0
            widest = max(titles, key=len, default="")
            for form in (widest, _short_title(widest)):
                artist.set_text(form)
                if _fit_text(artist, renderer, self.title_fits, largest, cut=False):
                    break
            size, short = artist.get_fontsize(), form != widest
            fitted = []
            for title in titles:  # each cut on its own, where even the short form is wide
                artist.set_text(_short_title(title) if short else title)
                _fit_text(artist, renderer, self.title_fits, size)
                fitted.append(artist.get_text())
            if len(self.fitted) >= 16:  # titles with values (--top-heads) vary by input
                self.fitted.pop(next(iter(self.fitted)))
            self.fitted[titles] = (fitted, size)
        return self.fitted[titles]

    def _labels_rows(self, n: int) -> bool:
        return n % self.shape.columns == 0 and n < self.shape.count

    def _labels_columns(self, n: int) -> bool:
        return self.shape.count - self.shape.columns <= n < self.shape.count

    def png(self, maps: AttentionMaps, panels: Sequence[MapPanel]) -> bytes:
        frame = (
            maps.model, maps.mode, maps.context(), tuple(maps.query_labels()),
            tuple(maps.key_tokens), tuple(panel.title for panel in panels),
        )  # fmt: skip
        if frame != self.frame_drawn:  # a new input: its labels and titles, drawn once
            self.canvas.restore_region(self.blank)
            self._set_frame(maps, panels)
            with _drawing(self.missing_glyphs):
                self._draw_labels(len(panels))  # first: a pasted strip never covers a title
                for artist in [self.header, *self.row_headers, *self.titles]:
                    self.figure.draw_artist(artist)
            self.framed = self.canvas.copy_from_bbox(self.figure.bbox)
            self.frame_drawn = frame
        else:
            self.canvas.restore_region(self.framed)
        pixels = np.asarray(self.canvas.buffer_rgba())
        for panel, (xs, ys) in zip(panels, self.pixels_of, strict=False):
            shades = np.clip(np.rint(panel.matrix * (255 / self.style.vmax)), 0, 255)
            cells = self.lookup[shades.astype(np.intp)]  # (T, S, 4)
            block = np.repeat(np.repeat(cells, np.diff(ys), axis=0), np.diff(xs), axis=1)
            pixels[ys[0] : ys[-1], xs[0] : xs[-1]] = block
        return encode_png(pixels)

    def _draw_labels(self, used: int) -> None:
        """Draw one panel's query labels and one panel's key labels, and paste them beside
        every other panel that shows them: the panels are a whole number of pixels apart,
        so the pixels are those matplotlib would draw there (a test holds them to it)."""
        pixels = np.asarray(self.canvas.buffer_rgba())
        height = pixels.shape[0]
        room = int(np.ceil(self.label_room * self.style.dpi))
        across, down = self.panel_pixels
        bottoms = [n for n in range(used) if self._labels_columns(n)]
        for side, panels in ((0, range(0, used, self.shape.columns)), (1, bottoms)):
            first, *others = panels
            for artist in self.labels[first][side]:
                self.figure.draw_artist(artist)
            xs, ys = self.pixels_of[first]
            over = self.label_overhang
            if side == 0:  # the query labels' strip left of the cells
                rows = slice(max(ys[0] - over, 0), ys[-1] + over)
                columns = slice(max(xs[0] - room, 0), xs[0])
            else:  # the key labels' strip below them
                rows = slice(ys[-1], min(ys[-1] + room, height))
                columns = slice(xs[0] - over, xs[-1] + over)
            strip = pixels[rows, columns].copy()
            row0, column0 = divmod(first, self.shape.columns)
            for n in others:
                row, column = divmod(n, self.shape.columns)
                dy, dx = (row - row0) * down, (column - column0) * across
                target = pixels[
                    rows.start + dy : rows.stop + dy, columns.start + dx : columns.stop + dx
                ]
                target[...] = strip[: target.shape[0], : target.shape[1]]

    def whole(self, maps: AttentionMaps, panels: Sequence[MapPanel]) -> Any:
        """The figure with every artist set for ``maps``, to be drawn whole by matplotlib."""
        self.frame_drawn = None  # the raster background no longer matches the artists
        artists = [*self._set_frame(maps, panels), *self.images]
        for n, image in enumerate(self.images):
            if n < len(panels):
                image.set_data(panels[n].matrix)
            image.set_visible(n < len(panels))
        for artist in artists:
            artist.set_animated(False)
        return self.figure

    def vector(self, maps: AttentionMaps, panels: Sequence[MapPanel], picture: Output) -> bytes:
        figure = self.whole(maps, panels)
        try:
            out = io.BytesIO()
            with _drawing(self.missing_glyphs):
                figure.savefig(out, format=picture.value, metadata=_metadata(picture))
            return out.getvalue()
        finally:
            for artist in [*self._set_frame(maps, panels), *self.images]:
                artist.set_animated(True)
            for image in self.images:
                image.set_visible(True)


def _bar_label(style: Style) -> str:
    if style.clips:
        return f"attention weight (≥ {style.vmax:g} drawn as {style.vmax:g})"
    return "attention weight"


def statistics_picture(corpus: CorpusStatistics, picture: Output, model: str) -> bytes:
    """A layers × heads heatmap of each statistic's corpus mean, side by side."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnviz.analysis.corpus import STATISTICS

    layers, heads, _ = corpus.means(STATISTICS[0])
    panel = (max(2.2, 0.35 * len(heads) + 1.2), max(1.8, 0.3 * len(layers) + 1.0))
    grid_rows = math.ceil(len(STATISTICS) / 3)
    figure = Figure(figsize=(panel[0] * 3, panel[1] * grid_rows + 0.6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(grid_rows, 3, squeeze=False)
    for ax, name in zip(axes.flat, STATISTICS, strict=True):
        _, _, grid = corpus.means(name)
        image = ax.imshow(
            np.asarray(grid, dtype=float),
            cmap=matplotlib.colormaps["viridis"],
            interpolation="nearest",
            aspect="auto",
        )
        ax.set_title(name.replace("_", " "), fontsize=9)
        ax.set_xticks(range(len(heads)), [str(head) for head in heads], fontsize=6)
        ax.set_yticks(range(len(layers)), [str(layer) for layer in layers], fontsize=6)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        figure.colorbar(image, ax=ax).ax.tick_params(labelsize=6)
    figure.suptitle(f"{model} · corpus means over {corpus.inputs} inputs", fontsize=10)
    figure.subplots_adjust(left=0.06, right=0.97, bottom=0.1, top=0.86, wspace=0.45, hspace=0.6)
    out = io.BytesIO()
    with _drawing(set()):
        figure.savefig(out, format=picture.value, metadata=_metadata(picture))
    return out.getvalue()
