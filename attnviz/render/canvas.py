"""The canvas that draws one attention map with matplotlib (Agg), :class:`HeadCanvas`
(small multiples: :mod:`attnviz.render.grid_canvas`), laid out once per shape and style
(:mod:`attnviz.render.layout`) and reused for every map of that shape.

PNGs take a fast path: the frame is drawn once, and per map the cells are painted
straight into the pixel buffer from the colormap's lookup table; the picture is the
one matplotlib would draw (a test holds the fast path to it). SVG and PDF are the same
figure drawn whole by matplotlib. Output is reproducible: no timestamps in PNG, SVG or
PDF metadata.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Output
from attnviz.render.figures import check_drawable, drawing, fit_text, metadata
from attnviz.render.fonts import Fonts
from attnviz.render.layout import HeadLayout, head_layout
from attnviz.render.png import encode_png
from attnviz.render.style import (
    MAX_LABEL,
    MIN_LABEL_POINTS,
    VALUES_UP_TO,
    Frame,
    Style,
    axes_note,
    cell_text,
    token_label,
)

if TYPE_CHECKING:
    pass


class HeadCanvas:
    """A reusable single-head figure for maps of one shape (query tokens × key tokens)."""

    def __init__(self, queries: int, keys: int, style: Style, label_chars: int = MAX_LABEL) -> None:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.queries, self.keys, self.style = queries, keys, style
        self.missing_glyphs: set[str] = set()  # characters no font had, in any drawing
        layout = head_layout(queries, keys, style, label_chars)
        width, height, size = layout.width, layout.height, layout.labels.size
        text_size = style.font_size or 9.0
        check_drawable(width, height, style.dpi)
        self.figure = Figure(figsize=(width, height), dpi=style.dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        self.axes = self.figure.add_axes(layout.cells_box)
        self.cmap = matplotlib.colormaps[style.cmap]
        self.image = self.axes.imshow(
            np.zeros((queries, keys)),
            cmap=self.cmap,
            vmin=0.0,
            vmax=style.top,
            interpolation="nearest",
            aspect="auto",
            animated=True,
        )
        self.axes.set_xticks([])
        self.axes.set_yticks([])
        self._add_colour_bar(layout, text_size)
        self.labels = layout.labels
        self.key_labels, self.query_labels = self._token_texts(size)
        self.header = self.figure.text(
            0.5, 1 - 0.12 / height, "", ha="center", va="top", fontsize=text_size, animated=True
        )
        self.title = self.axes.set_title("", fontsize=text_size, animated=True)
        self.values = self._value_texts(min(size, 7))
        self.fonts = Fonts.installed()
        self.fonts.dress(self.figure)
        with drawing(self.missing_glyphs):
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

    def _add_colour_bar(self, layout: HeadLayout, text_size: float) -> None:
        """The colour bar beside the cells, and under the cells the note of which labels
        are shown (every second, third…, where not all fit)."""
        style, width, height = self.style, layout.width, layout.height
        colour_bar = self.figure.add_axes(layout.bar_box)
        bar = self.figure.colorbar(
            self.image, cax=colour_bar, extend="max" if style.clips else "neither"
        )
        bar.set_label(style.bar_label, fontsize=max(MIN_LABEL_POINTS, text_size - 1))
        colour_bar.tick_params(labelsize=max(MIN_LABEL_POINTS, text_size - 2))
        note = axes_note(layout.labels.key_step, layout.labels.query_step)
        self.figure.text(0.05 / width, layout.note_top / height, note, fontsize=MIN_LABEL_POINTS,
                         va="top", ha="left")  # fmt: skip

    def _token_texts(self, size: float) -> tuple[list[Any], list[Any]]:
        """The texts the keys' labels (under the cells, turned) and the queries' (left of
        them) are drawn in: one per shown label, every key_step-th and query_step-th."""
        queries, keys, labels = self.queries, self.keys, self.labels
        key_texts = [
            self.axes.text(k, queries - 0.5 + 0.15, "", rotation=90, ha="center", va="top",
                           fontsize=size, animated=True, transform=self.axes.transData)
            for k in range(0, keys, labels.key_step)
        ]  # fmt: skip
        query_texts = [
            self.axes.text(-0.5 - 0.15, q, "", ha="right", va="center", fontsize=size,
                           animated=True, transform=self.axes.transData)
            for q in range(0, queries, labels.query_step)
        ]  # fmt: skip
        return key_texts, query_texts

    def _value_texts(self, size: float) -> list[Any]:
        """A text per cell for its weight, where the style asks for values and the map is
        small enough to read them."""
        if not self.style.values or max(self.queries, self.keys) > VALUES_UP_TO:
            return []
        return [
            self.axes.text(k, q, "", ha="center", va="center", fontsize=size, animated=True)
            for q in range(self.queries)
            for k in range(self.keys)
        ]

    def _set_frame(self, frame: Frame) -> list[Any]:
        """Put one input's header and labels on their artists; return those artists."""
        self.header.set_text(self.fonts.text(frame.header))
        # A short map's figure is narrow, and a model name (builtin:layers=…) is long.
        room = self.figure.bbox.width * 0.96
        fit_text(self.header, self.canvas.get_renderer(), room, self.style.font_size or 9.0)
        key_labels = frame.key_labels[:: self.labels.key_step]
        for artist, label in zip(self.key_labels, key_labels, strict=True):
            artist.set_text(self.fonts.text(token_label(label)))
        query_labels = frame.query_labels[:: self.labels.query_step]
        for artist, label in zip(self.query_labels, query_labels, strict=True):
            artist.set_text(self.fonts.text(token_label(label)))
        return [self.header, *self.key_labels, *self.query_labels]

    def _set_cells(self, matrix: np.ndarray, title: str) -> None:
        self.image.set_data(matrix)
        self.title.set_text(self.fonts.text(title))
        for artist, weight in zip(self.values, matrix.ravel(), strict=False):
            artist.set_text(cell_text(weight))
            artist.set_color("black" if weight / self.style.top > 0.6 else "white")

    def png(self, matrix: np.ndarray, frame: Frame, title: str) -> bytes:
        """The picture of one map as PNG bytes, by the fast path."""
        if frame != self.frame_drawn:  # a new input: draw its frame once, for all its maps
            self.canvas.restore_region(self.blank)
            with drawing(self.missing_glyphs):
                for artist in self._set_frame(frame):
                    self.figure.draw_artist(artist)
            self.framed = self.canvas.copy_from_bbox(self.figure.bbox)
            self.frame_drawn = frame
        else:
            self.canvas.restore_region(self.framed)
        self._set_cells(matrix, title)
        pixels = np.asarray(self.canvas.buffer_rgba())
        shades = np.clip(np.rint(matrix * (255 / self.style.top)), 0, 255).astype(np.intp)
        cells = self.lookup[shades]  # (T, S, 4)
        block = np.repeat(np.repeat(cells, np.diff(self.y), axis=0), np.diff(self.x), axis=1)
        pixels[self.y[0] : self.y[-1], self.x[0] : self.x[-1]] = block
        with drawing(self.missing_glyphs):
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
            extent = self.title.get_window_extent()
            top, bottom = int(rows - extent.y1) - 2, int(np.ceil(rows - extent.y0)) + 2
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
            with drawing(self.missing_glyphs):
                self.figure.savefig(out, format=picture.value, metadata=metadata(picture))
            return out.getvalue()
        finally:
            for artist in animated:
                artist.set_animated(True)
