"""The canvas of small multiples (the layer and model views): laid out once per shape and
style (:mod:`attnviz.render.layout`), every panel a rectangle of cells on one board.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Output
from attnviz.panels import notes_of, query_labels_of
from attnviz.render.figures import check_drawable, drawing, fit_text, metadata
from attnviz.render.fonts import Fonts
from attnviz.render.layout import GridShape, grid_layout
from attnviz.render.png import encode_png
from attnviz.render.style import (
    MIN_LABEL_POINTS,
    Style,
    axes_note,
    short_title,
    token_label,
)

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel


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
        self.boxes = [layout.cells(n) for n in range(shape.count)]  # no empty frame
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
