"""Where a picture puts its cells, labels, titles and colour bar: plain arithmetic in
inches (from the bottom left) and pixels, no matplotlib, so that it is tested on its
own (tests/test_layout.py). The canvases draw what these layouts say.

A single map (:func:`head_layout`): cells that shrink as maps grow, fixed margins for
the labels, a colour bar on the right. Small multiples (:func:`grid_layout`): panels a
whole number of pixels apart, so that labels drawn beside one panel can be pasted
beside the others pixel for pixel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.errors import UsageError
from attnviz.panels import query_labels_of
from attnviz.render.style import MAX_LABEL, MIN_LABEL_POINTS, Style, token_label

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel

INCH = 72  # points
MARGIN_LEFT = 1.15  # inches, room for query labels
MARGIN_BOTTOM = 1.15  # room for key labels, written upwards
MARGIN_TOP = 0.65  # the header (model and mode) and the title (layer and head)
MARGIN_RIGHT = 1.0  # the colour bar
NOTE_ROOM = 0.35  # under the key labels, for the note of a picture in a given size
GRID_COLUMNS = 6  # heads per row when one layer's heads (or chosen heads) wrap
GRID_WIDTH = 16.0  # inches: strips side by side up to about this width
GRID_GAP = 0.15  # inches between panels
HEAD_CELL = 0.4  # inches: the largest cell of a single map
GRID_CELL = 0.25  # of a panel among many
MIN_MAP_SIDE = 0.6  # inches: the least a side of a few tokens beside many is drawn
STRIP_RATIO = 8  # "many": this many times as many

Box = tuple[float, float, float, float]  # a rectangle in figure fractions: x, y, width, height


def cell_inches(count: int) -> float:
    """Cells shrink as maps grow, so that a picture stays within about ten inches."""
    return min(max(10.0 / max(count, 1), 0.01), HEAD_CELL)


def cell_sides(cell: float, queries: int, keys: int, largest: float) -> tuple[float, float]:
    """A cell's width and height: ``cell`` square, except along a side of a few tokens
    next to many (STRIP_RATIO times as many or more: the last token's row over 8,000
    keys), which is drawn at least MIN_MAP_SIDE long (never longer than the other side),
    in cells of at most ``largest``: a strip, not a line one pixel high."""
    many = max(queries, keys)
    shortest = min(MIN_MAP_SIDE, many * cell)

    def side(count: int) -> float:
        if many < STRIP_RATIO * count:
            return cell
        return max(cell, min(largest, shortest / count))

    return side(keys), side(queries)


@dataclass(frozen=True)
class Labels:
    """Token labels: one font size, and the step between labels shown along each side
    (every label where the cells are tall enough for the size, else every step-th)."""

    size: float  # points
    key_step: int
    query_step: int


def label_step(
    cell_points: float, wanted: float | None = None, largest: float = 9.0
) -> tuple[float, int]:
    """Font size for token labels and the step between labels shown: every label when
    the cells are tall enough for the size, else every ``step``-th. Never below
    MIN_LABEL_POINTS."""
    room = cell_points * 0.8
    size = max(MIN_LABEL_POINTS, wanted if wanted is not None else min(largest, room))
    return size, _step(size, room)


def _step(size: float, room: float) -> int:
    return max(1, math.ceil(size / max(room, 0.1) - 1e-9))


def labels_for(
    width: float, height: float, wanted: float | None = None, largest: float = 9.0
) -> Labels:
    """The labels of cells ``width`` × ``height`` inches: sized for the narrower side (one
    size on both axes), each side thinned as its own cells need."""
    size, _ = label_step(min(width, height) * INCH, wanted, largest)
    return Labels(size, _step(size, width * INCH * 0.8), _step(size, height * INCH * 0.8))


def head_margins(style: Style, label_chars: int) -> tuple[float, float]:
    """Inches left of and below a map's cells, for its token labels (and under them the
    note). By default room for the longest label any input may have, so that one canvas
    serves every input of a shape; in a given figure size (a paper's), room for the
    labels of this input, so that the cells get the rest."""
    if style.figsize is None:
        return MARGIN_LEFT, MARGIN_BOTTOM
    labels = 0.12 + min(label_chars, MAX_LABEL) * (style.font_size or 9.0) * 0.62 / INCH
    return labels, labels + NOTE_ROOM


def head_figure_size(queries: int, keys: int) -> tuple[float, float]:
    """Width and height in inches: fixed margins around cells that shrink as maps grow."""
    width, height = cell_sides(cell_inches(max(queries, keys)), queries, keys, HEAD_CELL)
    return MARGIN_LEFT + keys * width + MARGIN_RIGHT, MARGIN_TOP + queries * height + MARGIN_BOTTOM


def head_cell(
    queries: int, keys: int, style: Style, margins: tuple[float, float]
) -> tuple[float, float]:
    """A cell's width and height: by the map's size, or what a given figure size leaves
    beside the ``margins`` for the labels (left, bottom)."""
    if style.figsize is None:
        return cell_sides(cell_inches(max(queries, keys)), queries, keys, HEAD_CELL)
    width, height = style.figsize
    left, bottom = margins
    across, down = (width - left - MARGIN_RIGHT) / keys, (height - MARGIN_TOP - bottom) / queries
    cell = min(across, down)
    if cell <= 0:
        smallest = (left + MARGIN_RIGHT + 1, MARGIN_TOP + bottom + 1)
        raise UsageError(
            f"--figsize {width:g},{height:g} leaves no room for the map after its labels "
            f"and colour bar: give at least {smallest[0]:.1f},{smallest[1]:.1f}"
        )
    cell_width, cell_height = cell_sides(cell, queries, keys, HEAD_CELL)
    return min(cell_width, across), min(cell_height, down)


@dataclass(frozen=True)
class HeadLayout:
    """A single map's picture."""

    queries: int
    keys: int
    width: float  # inches
    height: float
    left: float  # the cells' lower left corner
    bottom: float
    cell_width: float  # inches
    cell_height: float
    labels: Labels
    note_top: float  # the note on rows and columns hangs from here

    @property
    def cells_box(self) -> Box:
        return (
            self.left / self.width,
            self.bottom / self.height,
            self.keys * self.cell_width / self.width,
            self.queries * self.cell_height / self.height,
        )

    @property
    def bar_box(self) -> Box:
        """Beside the cells and as tall as they are, whatever the figure's size."""
        _, y, _, height = self.cells_box
        return (
            (self.left + self.keys * self.cell_width + 0.2) / self.width,
            y,
            0.15 / self.width,
            height,
        )


def head_layout(queries: int, keys: int, style: Style, label_chars: int = MAX_LABEL) -> HeadLayout:
    """The layout of one map of ``queries`` × ``keys``, with margins for labels of up to
    ``label_chars`` characters where the figure's size is given."""
    width, height = style.figsize or head_figure_size(queries, keys)
    left, bottom = head_margins(style, label_chars)
    cell_width, cell_height = head_cell(queries, keys, style, (left, bottom))
    # A given size that the cells cannot fill at their aspect: the map in the middle.
    left += max(0.0, width - left - keys * cell_width - MARGIN_RIGHT) / 2
    bottom += max(0.0, height - bottom - queries * cell_height - MARGIN_TOP) / 2
    labels = labels_for(cell_width, cell_height, style.font_size)
    # Just under the grid's corner, in the room the query labels leave: not adrift at
    # the bottom of a figure whose margin is sized for the longest key labels. Margins
    # sized for this input's labels leave no such room: then under the key labels.
    note_top = bottom - 0.08 if style.figsize is None else NOTE_ROOM - 0.03
    return HeadLayout(
        queries, keys, width, height, left, bottom, cell_width, cell_height, labels, note_top
    )


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

    def labels_rows(self, n: int) -> bool:
        """Whether panel ``n`` has query labels: the first of each row, as shared axes."""
        return n % self.columns == 0 and n < self.count

    def labels_columns(self, n: int) -> bool:
        """Whether panel ``n`` has key labels: the lowest drawn of each column."""
        return self.count - self.columns <= n < self.count


def grid_shape(
    maps: AttentionMaps,
    panels: Sequence[MapPanel] | None,
    figsize: tuple[float, float] | None = None,
) -> GridShape:
    """How the panels lie: a row per layer (every layer × head), or one layer's heads and
    chosen panels wrapped into rows: of six, or within a given ``figsize`` as many across
    as give the largest cells."""
    count = len(panels) if panels is not None else maps.weights.shape[0] * maps.weights.shape[1]
    rows, columns = maps.weights.shape[:2] if panels is None else (1, count)
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    headers = panels is None and maps.aggregate is None and rows > 1  # a row per layer
    if keys >= STRIP_RATIO * queries:  # strips (--rows last): as many across as GRID_WIDTH holds
        across = keys * grid_cell(queries, keys) + GRID_GAP
        columns = max(1, min(count, int(GRID_WIDTH // across)))
        rows, headers = -(-count // columns), False
    elif rows == 1 and figsize is not None:
        columns = _fitting_columns(count, queries, keys, figsize)
        rows = -(-count // columns)
    elif rows == 1 and columns > GRID_COLUMNS:
        rows, columns = -(-columns // GRID_COLUMNS), GRID_COLUMNS
    labels = [*query_labels_of(maps), *maps.key_tokens]
    longest = max((len(token_label(token)) for token in labels), default=1)
    return GridShape(rows, columns, queries, keys, longest, count, headers)


def _fitting_columns(count: int, queries: int, keys: int, figsize: tuple[float, float]) -> int:
    """How many of ``count`` maps of ``queries`` × ``keys`` cells go across a figure of
    ``figsize`` inches: the most that give the largest cells (then the fewest empty
    places), so that a wide figure gets one row and a tall one a column."""
    width, height = figsize

    def cell(columns: int) -> tuple[float, int]:
        rows = -(-count // columns)
        side = min(width / (columns * keys), height / (rows * queries))
        return side, -(rows * columns - count)

    return max(range(1, count + 1), key=cell)


@dataclass(frozen=True)
class GridLayout:
    """Small multiples: panels on a board, a whole number of pixels apart."""

    shape: GridShape
    dpi: int
    width: float  # inches
    height: float
    cell_width: float
    cell_height: float
    labels: Labels
    label_room: float  # inches left of the first column and under the last row
    gap: float  # between panels
    panel_width: float  # a panel and the gap after it
    panel_height: float
    left_edge: float  # of the first column's cells
    top_edge: float  # of the first row's cells
    title_size: float  # points, of the panels' titles and the row headers
    header_size: float  # points, of the figure's header

    @property
    def panel_pixels(self) -> tuple[int, int]:
        return round(self.panel_width * self.dpi), round(self.panel_height * self.dpi)

    @property
    def grid_width(self) -> float:
        return self.shape.columns * self.panel_width

    def cells(self, n: int) -> tuple[float, float, float, float]:
        """Panel ``n``'s cells: x0, x1, y0, y1 in inches."""
        row, column = divmod(n, self.shape.columns)
        x0 = self.left_edge + column * self.panel_width
        y1 = self.top_edge - row * self.panel_height
        return (
            x0,
            x0 + self.shape.keys * self.cell_width,
            y1 - self.shape.queries * self.cell_height,
            y1,
        )

    @property
    def title_fits(self) -> int:
        """Pixels: a title over its own panel only."""
        return self.panel_pixels[0] - 4

    @property
    def row_fits(self) -> float:
        """Pixels: a row header beside its own row only."""
        return self.shape.queries * self.cell_height * self.dpi

    def row_header(self, row: int) -> tuple[float, float]:
        """Where the header of a row of panels is centred, left of its labels."""
        middle = self.top_edge - row * self.panel_height - self.shape.queries * self.cell_height / 2
        return self.left_edge - self.label_room - 0.05, middle

    @property
    def label_overhang(self) -> int:
        """Pixels: labels taller than their cells reach past the cells' ends by about half
        their size; pasted labels carry that much more, never more than half the gap."""
        half_label = math.ceil(self.labels.size / INCH * self.dpi * 0.6) + 2
        return min(half_label, int(self.gap * self.dpi / 2) - 1)

    def bar_box(self, style: Style) -> Box:
        """Beside the grid and as tall as its cells, or as its label if that is longer."""
        cells_bottom = self.cells(self.shape.columns * (self.shape.rows - 1))[2]
        label_length = len(style.bar_label) * max(MIN_LABEL_POINTS, self.title_size) * 0.62 / INCH
        bar_height = max(self.top_edge - cells_bottom, label_length)
        bar_bottom = (self.top_edge + cells_bottom - bar_height) / 2
        return (
            (self.left_edge + self.grid_width + 0.1) / self.width,
            bar_bottom / self.height,
            0.15 / self.width,
            bar_height / self.height,
        )


def grid_cell(queries: int, keys: int) -> float:
    """A panel's cell, before strips are stretched: down to a pixel or so per token, so
    that a 300-token model view stays a few megapixels."""
    return min(max(2.2 / max(queries, keys), 0.01), GRID_CELL)


def grid_layout(shape: GridShape, style: Style) -> GridLayout:
    """The layout of small multiples of ``shape``: sized by the maps, or what a given
    figure size leaves for the cells once labels, titles and the colour bar have room."""
    queries, keys = shape.queries, shape.keys
    cell = grid_cell(queries, keys)
    cell_width, cell_height = cell_sides(cell, queries, keys, GRID_CELL)
    label_size = labels_for(cell_width, cell_height, style.font_size, largest=7.0).size
    label_room = 0.08 + min(shape.label_chars, MAX_LABEL) * label_size * 0.62 / INCH
    title_size = style.font_size or 7.0
    title_room = 0.1 + title_size * 1.5 / INCH
    # Titles over every row of panels, or column headers once and row headers left.
    row_titles, once = (0.0, title_room) if shape.headers else (title_room, 0.0)
    left = 0.2 + (0.05 + title_size * 1.5 / INCH if shape.headers else 0.0)
    # Inches: between panels, above them for the header, right for the colour bar, and
    # below the key labels for the note.
    header_size = (style.font_size or 9.0) + 1
    gap, top, right, bottom = GRID_GAP, 0.2 + header_size * 1.4 / INCH, 1.1, 0.2
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
        cell_width, cell_height = cell_sides(cell, queries, keys, GRID_CELL)
        cell_width, cell_height = min(cell_width, across / keys), min(cell_height, down / queries)
    labels = labels_for(cell_width, cell_height, style.font_size, largest=7.0)
    # Panels a whole number of pixels apart: one panel's labels, drawn once, are then
    # pixel for pixel what matplotlib would draw at every other panel. Labels take room
    # only left of the first column and under the last row, as shared axes do.
    dpi = style.dpi
    panel_width = math.ceil((keys * cell_width + gap) * dpi) / dpi
    panel_height = math.ceil((row_titles + queries * cell_height + gap) * dpi) / dpi
    width, height = style.figsize or (
        left + label_room + shape.columns * panel_width + right,
        top + once + shape.rows * panel_height + label_room + bottom,
    )
    height = math.ceil(height * dpi) / dpi  # the top edge on a pixel: panels from there
    # A given size that the cells cannot fill at their aspect: the grid in the middle.
    grid_width, grid_height = shape.columns * panel_width, shape.rows * panel_height
    spare_x = max(0.0, width - (left + label_room + grid_width + right)) / 2
    spare_y = max(0.0, height - (top + once + grid_height + label_room + bottom)) / 2
    return GridLayout(
        shape=shape,
        dpi=dpi,
        width=width,
        height=height,
        cell_width=cell_width,
        cell_height=cell_height,
        labels=labels,
        label_room=label_room,
        gap=gap,
        panel_width=panel_width,
        panel_height=panel_height,
        left_edge=round((left + label_room + spare_x) * dpi) / dpi,
        top_edge=round((height - top - spare_y - title_room) * dpi) / dpi,
        title_size=title_size,
        header_size=header_size,
    )
