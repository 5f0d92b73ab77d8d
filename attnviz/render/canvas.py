"""The canvases that draw attention maps with matplotlib (Agg): one map
(:class:`HeadCanvas`) and small multiples (:class:`GridCanvas`), each laid out once per
shape and style (:mod:`attnviz.render.layout`) and reused for every map of that shape.

PNGs take a fast path: the frame is drawn once, and per map the cells are painted
straight into the pixel buffer from the colormap's lookup table; the picture is the
one matplotlib would draw (a test holds the fast path to it). SVG and PDF are the same
figure drawn whole by matplotlib. Output is reproducible: no timestamps in PNG, SVG or
PDF metadata.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Output
from attnviz.errors import UsageError, warn
from attnviz.panels import notes_of, query_labels_of
from attnviz.render.fonts import Fonts
from attnviz.render.layout import GridShape, grid_layout, head_layout
from attnviz.render.png import encode_png
from attnviz.render.style import (
    MAX_LABEL,
    MIN_LABEL_POINTS,
    VALUES_UP_TO,
    Frame,
    Style,
    axes_note,
    cell_text,
    short_title,
    token_label,
)

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel

_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font")


# Settings for every drawing, applied with rc_context so that no global state changes:
# stable ids inside SVG files; PDF streams compressed, with TrueType (Type 42)
# fonts, since the Type 3 fonts matplotlib embeds by default fail the checks of
# IEEE and ACM submission systems.
# Each map is its own image in SVG and PDF, not all resampled into one.
_RC: Any = {  # (matplotlib's stubs spell every rc key out as a Literal)
    "svg.hashsalt": "attnviz",
    "pdf.compression": 6,
    "pdf.fonttype": 42,
    "image.composite_image": False,
}


@contextmanager
def drawing(missing_glyphs: set[str]) -> Iterator[None]:
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


def warn_missing(missing: set[str]) -> None:
    """One line naming the characters no installed font has (drawn as boxes)."""
    shown = "".join(sorted(missing)[:20]) + ("…" if len(missing) > 20 else "")
    warn(
        f"no installed font has {len(missing)} of the characters ({shown}); they are drawn "
        "as boxes. Install a font that covers them, such as Noto Sans CJK or Noto Color Emoji."
    )


def saved(
    figure: Any,
    picture: Output,
    laid_out: bool = False,
    then: Callable[[Any], None] | None = None,
) -> bytes:
    """A figure written in ``picture``'s format, its texts in the font stack (each
    character none of its fonts has escaped), laid out first unless ``laid_out`` (its
    room set by hand), and ``then`` given its renderer (to fit labels to the room the
    layout left them): a glyph still missing (a face of the stack that lacks it), met in
    any of it, said in one warning, not as matplotlib's warning per glyph."""
    missing: set[str] = set()
    out = io.BytesIO()
    Fonts.installed().dress(figure)
    with drawing(missing):
        if not laid_out:
            figure.tight_layout()
        if then is not None:
            then(figure.canvas.get_renderer())
        figure.savefig(out, format=picture.value, metadata=metadata(picture))
    if missing:
        warn_missing(missing)
    return out.getvalue()


def fit_text(text: Any, renderer: Any, room: float, largest: float, cut: bool = True) -> bool:
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


def metadata(picture: Output) -> dict[str, Any]:
    # Dates make two runs on the same input differ: leave them out.
    return {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}[
        picture
    ]


# Agg addresses a figure's pixels, and the copies of them a canvas keeps, with 32-bit
# byte offsets: a larger figure fails to allocate, or corrupts memory and aborts.
MAX_PIXELS = (2**31 - 1) // 4


def check_drawable(width: float, height: float, dpi: int) -> None:
    """Refuse, before anything is drawn, a figure of more pixels than Agg can address."""
    columns, rows = round(width * dpi), round(height * dpi)
    if columns * rows > MAX_PIXELS:
        raise UsageError(
            f"a figure of {columns:,} × {rows:,} pixels ({width:.3g} × {height:.3g} inches at "
            f"{dpi} dpi) is too large to draw (at most {MAX_PIXELS / 1e6:.0f} million pixels): "
            "lower --dpi or --figsize, or pool the maps (--pool)"
        )


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
        colour_bar = self.figure.add_axes(layout.bar_box)
        bar = self.figure.colorbar(
            self.image, cax=colour_bar, extend="max" if style.clips else "neither"
        )
        bar.set_label(style.bar_label, fontsize=max(MIN_LABEL_POINTS, text_size - 1))
        colour_bar.tick_params(labelsize=max(MIN_LABEL_POINTS, text_size - 2))
        note = axes_note(layout.labels.key_step, layout.labels.query_step)
        self.figure.text(0.05 / width, layout.note_top / height, note, fontsize=MIN_LABEL_POINTS,
                         va="top", ha="left")  # fmt: skip
        self.key_labels = [
            self.axes.text(k, queries - 0.5 + 0.15, "", rotation=90, ha="center", va="top",
                           fontsize=size, animated=True, transform=self.axes.transData)
            for k in range(0, keys, layout.labels.key_step)
        ]  # fmt: skip
        self.query_labels = [
            self.axes.text(-0.5 - 0.15, q, "", ha="right", va="center", fontsize=size,
                           animated=True, transform=self.axes.transData)
            for q in range(0, queries, layout.labels.query_step)
        ]  # fmt: skip
        self.labels = layout.labels
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
        from matplotlib.figure import Figure

        self.shape, self.style = shape, style
        self.missing_glyphs: set[str] = set()
        layout = grid_layout(shape, style)
        self.layout = layout
        check_drawable(layout.width, layout.height, style.dpi)
        self.figure = Figure(figsize=(layout.width, layout.height), dpi=style.dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        board = self.figure.add_axes((0, 0, 1, 1))
        board.set_axis_off()
        board.set_xlim(0, layout.width)
        board.set_ylim(0, layout.height)
        board.set_autoscale_on(False)
        self.cmap = matplotlib.colormaps[style.cmap]
        self.lookup = np.rint(self.cmap(np.linspace(0, 1, 256)) * 255).astype(np.uint8)
        self.boxes = [layout.cells(n) for n in range(shape.rows * shape.columns)]
        self.fitted: dict[tuple[str, ...], tuple[list[str], float]] = {}  # titles as they fit
        self.images: list[Any] = []  # matplotlib's artists, one per panel
        self.titles: list[Any] = []
        self.labels: list[Any] = []
        for n, box in enumerate(self.boxes):
            self._add_panel(board, n, box)
        self.row_headers = [
            board.text(*layout.row_header(row), "", ha="right", va="center", rotation=90,
                       fontsize=layout.title_size, animated=True)
            for row in range(shape.rows if shape.headers else 0)
        ]  # fmt: skip
        self.header = self.figure.text(
            0.5, 1 - 0.1 / layout.height, "", ha="center", va="top",
            fontsize=layout.header_size, animated=True,
        )  # fmt: skip
        labels = layout.labels
        if max(labels.key_step, labels.query_step) > 1:
            note = axes_note(labels.key_step, labels.query_step).splitlines()[-1]
            self.figure.text(0.005, 0.005, note, fontsize=MIN_LABEL_POINTS)
        self._add_colour_bar()
        self.fonts = Fonts.installed()
        self.fonts.dress(self.figure)
        with drawing(self.missing_glyphs):
            self.canvas.draw()
        self.blank = self.canvas.copy_from_bbox(self.figure.bbox)
        self.framed: Any = None
        self.frame_drawn: tuple | None = None
        rows = int(self.figure.bbox.height)
        transform = board.transData
        self.pixels_of: list[tuple[np.ndarray, np.ndarray]] = []
        for x0, x1, y0, y1 in self.boxes:
            (left, bottom), (right, top) = transform.transform([(x0, y0), (x1, y1)])
            xs = np.rint(np.linspace(left, right, shape.keys + 1)).astype(int)
            ys = np.rint(np.linspace(rows - top, rows - bottom, shape.queries + 1)).astype(int)
            self.pixels_of.append((xs, ys))

    def _add_panel(self, board: Any, n: int, box: tuple[float, float, float, float]) -> None:
        """Panel ``n``'s image, border, title and (as in a grid of shared axes) query labels
        left of each row of panels and key labels under the lowest panel of each column."""
        from matplotlib.patches import Rectangle

        x0, x1, y0, y1 = box
        width, height, labels = self.layout.cell_width, self.layout.cell_height, self.layout.labels
        image = board.imshow(
            np.zeros((self.shape.queries, self.shape.keys)),
            cmap=self.cmap,
            vmin=0.0,
            vmax=self.style.top,
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
                       fontsize=self.layout.title_size, animated=True)
        )  # fmt: skip
        rows = [
            board.text(x0 - 0.03, y1 - (q + 0.5) * height, "", ha="right", va="center",
                       fontsize=labels.size, animated=True)
            for q in range(0, self.shape.queries, labels.query_step)
        ] if self.shape.labels_rows(n) else []  # fmt: skip
        columns = [
            board.text(x0 + (k + 0.5) * width, y0 - 0.03, "", ha="center", va="top",
                       rotation=90, fontsize=labels.size, animated=True)
            for k in range(0, self.shape.keys, labels.key_step)
        ] if self.shape.labels_columns(n) else []  # fmt: skip
        self.labels.append((rows, columns))

    def _add_colour_bar(self) -> None:
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        style, title_size = self.style, self.layout.title_size
        bar_axes = self.figure.add_axes(self.layout.bar_box(style))
        mappable = ScalarMappable(Normalize(0.0, style.top), self.cmap)
        bar = self.figure.colorbar(
            mappable, cax=bar_axes, extend="max" if style.clips else "neither"
        )
        bar.set_label(style.bar_label, fontsize=max(MIN_LABEL_POINTS, title_size))
        bar_axes.tick_params(labelsize=max(MIN_LABEL_POINTS, title_size - 1))

    def _set_frame(self, maps: AttentionMaps, panels: Sequence[MapPanel]) -> list[Any]:
        """Put one input's header, titles and labels on their artists; return them all."""
        style = self.style
        header = style.titles(f"{maps.model} · {maps.mode} attention{notes_of(maps)}")
        self.header.set_text(self.fonts.text(header))
        room = self.figure.bbox.width * 0.96  # a long model name and notes, on a few maps
        fit_text(self.header, self.canvas.get_renderer(), room, self.layout.header_size)
        labels = self.layout.labels
        queries = [self.fonts.text(token_label(token)) for token in query_labels_of(maps)]
        keys = [self.fonts.text(token_label(token)) for token in maps.key_tokens]
        queries, keys = queries[:: labels.query_step], keys[:: labels.key_step]
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
                if (
                    artist.get_window_extent(self.canvas.get_renderer()).height
                    > self.layout.row_fits
                ):
                    artist.set_text(short_title(row_header))
        else:
            titles, size = self._fitted_titles(
                tuple(self.fonts.text(panel.title) for panel in panels) if shown else ()
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
            for form in (widest, short_title(widest)):
                artist.set_text(form)
                if fit_text(artist, renderer, self.layout.title_fits, largest, cut=False):
                    break
            size, short = artist.get_fontsize(), form != widest
            fitted = []
            for title in titles:  # each cut on its own, where even the short form is wide
                artist.set_text(short_title(title) if short else title)
                fit_text(artist, renderer, self.layout.title_fits, size)
                fitted.append(artist.get_text())
            if len(self.fitted) >= 16:  # titles with values (--top-heads) vary by input
                self.fitted.pop(next(iter(self.fitted)))
            self.fitted[titles] = (fitted, size)
        return self.fitted[titles]

    def png(self, maps: AttentionMaps, panels: Sequence[MapPanel]) -> bytes:
        frame = (
            maps.model, maps.mode, notes_of(maps), tuple(query_labels_of(maps)),
            tuple(maps.key_tokens), tuple(panel.title for panel in panels),
        )  # fmt: skip
        if frame != self.frame_drawn:  # a new input: its labels and titles, drawn once
            self.canvas.restore_region(self.blank)
            self._set_frame(maps, panels)
            with drawing(self.missing_glyphs):
                self._draw_labels(len(panels))  # first: a pasted strip never covers a title
                for artist in [self.header, *self.row_headers, *self.titles]:
                    self.figure.draw_artist(artist)
            self.framed = self.canvas.copy_from_bbox(self.figure.bbox)
            self.frame_drawn = frame
        else:
            self.canvas.restore_region(self.framed)
        pixels = np.asarray(self.canvas.buffer_rgba())
        for panel, (xs, ys) in zip(panels, self.pixels_of, strict=False):
            shades = np.clip(np.rint(panel.matrix * (255 / self.style.top)), 0, 255)
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
        room = int(np.ceil(self.layout.label_room * self.style.dpi))
        across, down = self.layout.panel_pixels
        bottoms = [n for n in range(used) if self.shape.labels_columns(n)]
        for side, panels in ((0, range(0, used, self.shape.columns)), (1, bottoms)):
            first, *others = panels
            for artist in self.labels[first][side]:
                self.figure.draw_artist(artist)
            xs, ys = self.pixels_of[first]
            over = self.layout.label_overhang
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
            with drawing(self.missing_glyphs):
                figure.savefig(out, format=picture.value, metadata=metadata(picture))
            return out.getvalue()
        finally:
            for artist in [*self._set_frame(maps, panels), *self.images]:
                artist.set_animated(True)
            for image in self.images:
                image.set_visible(True)
