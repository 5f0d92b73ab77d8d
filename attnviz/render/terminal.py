"""Heatmaps in the terminal, drawn with rich from AttentionMaps.

One panel per (layer, head): rows are query tokens, columns key tokens. Panels
sit side by side as far as the width allows. Colour is a background per cell on
a perceptual ramp (viridis); with no colour (a pipe, NO_COLOR) cells are shaded
with ``░▒▓█``. Labels are always plain Text, never markup, and every control
character in them is made visible first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import regex
from rich.cells import cell_len
from rich.color import Color
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.style import Style
from rich.table import Table
from rich.text import Text

from attnviz.analysis.grid import pool_labels, pool_map
from attnviz.panels import notes_of, panels_of, query_labels_of
from attnviz.render import palette
from attnviz.safe_text import display_label, spaces_shown

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel

_SHADES = " ·░▒▓█"  # blank only for exactly zero: masked keys stay visibly empty
_MAX_ROW_LABEL = 12
_MAX_COLUMN_CELL = 6
_MIN_CELL = 2  # room for one wide character (CJK, emoji)
_VALUE_CELL = 3  # ".42", "1.0"
_MAX_VERTICAL_LABEL = 8
_PANEL_FRAME = 4  # two borders and two padding columns
_TITLE_FRAME = 6  # corners, the rules either side of a title, and its padding
_GRAPHEME = regex.compile(r"\X")


@dataclass(frozen=True)
class Layout:
    """How a set of heatmaps is laid out in a given width."""

    cell: int  # characters per cell
    row_label: int  # characters for query labels
    pool: int  # tokens per pooled group (1 = no pooling)
    values: bool  # numbers printed in the cells
    vertical_labels: bool  # key labels written top to bottom

    def panel_width(self, num_keys: int) -> int:
        return (
            _PANEL_FRAME + self.row_label + num_keys * (self.cell + 1)
        )  # a space before each cell


def colour(weight: float) -> Color:
    """The palette colour of a weight in [0, 1], for rich."""
    return Color.from_rgb(*palette.rgb(weight))


def shade(weight: float) -> str:
    """A shade character for a weight in [0, 1]: five equal bands above exactly zero."""
    if weight <= 0.0:
        return _SHADES[0]
    bands = len(_SHADES) - 1
    return _SHADES[1 + min(int(weight * bands), bands - 1)]


def format_weight(weight: float) -> str:
    """Three characters: ``.42``, ``1.0``; a value-weighted map's ``2.4``, ``13``."""
    text = f"{weight:.2f}"
    if weight > 1 and text != "1.00":
        return f"{weight:.1f}" if weight < 9.95 else f"{min(weight, 999):.0f}"
    return "1.0" if text.startswith("1") else text[1:]


def fit(label: str, width: int) -> Text:
    """A label cut with an ellipsis and padded to exactly ``width`` cells."""
    text = Text(label, no_wrap=True)
    text.truncate(width, overflow="ellipsis", pad=True)
    return text


def choose_layout(
    query_labels: Sequence[str], key_labels: Sequence[str], width: int, values: bool
) -> Layout:
    """The widest readable cells that fit one panel in ``width``; pool tokens if none do."""
    row_label = min(max(map(cell_len, query_labels)), _MAX_ROW_LABEL)
    longest_key = max(map(cell_len, key_labels))
    preferred = min(max(longest_key, _MIN_CELL, _VALUE_CELL if values else 0), _MAX_COLUMN_CELL)
    for cell in range(preferred, _MIN_CELL - 1, -1):
        if _PANEL_FRAME + row_label + len(key_labels) * (cell + 1) <= width:
            return Layout(
                cell=cell,
                row_label=row_label,
                pool=1,
                values=values and cell >= _VALUE_CELL,
                vertical_labels=cell < 3 and longest_key > cell,
            )
    room = max(width - _PANEL_FRAME - row_label, _MIN_CELL + 1)
    pool = math.ceil(len(key_labels) / (room // (_MIN_CELL + 1)))
    return Layout(
        cell=_MIN_CELL, row_label=row_label, pool=pool, values=False, vertical_labels=True
    )


def _header(key_labels: Sequence[str], layout: Layout) -> list[Text]:
    indent = " " * layout.row_label
    if not layout.vertical_labels:
        line = Text(indent)
        for label in key_labels:
            line.append(" ")
            line.append_text(fit(label, layout.cell))
        return [line]
    columns = [_GRAPHEME.findall(label) for label in key_labels]
    height = min(max(map(len, columns)), _MAX_VERTICAL_LABEL)
    lines = []
    for row in range(height):
        line = Text(indent)
        for characters in columns:
            if row < len(characters):
                last_row_cut = row == height - 1 and len(characters) > height
                piece = "…" if last_row_cut else characters[row]
            else:
                piece = ""
            line.append(" ")
            line.append_text(fit(piece, layout.cell))
        lines.append(line)
    return lines


def _cell(weight: float, scale: float, layout: Layout, use_colour: bool) -> Text:
    relative = weight / scale if scale > 0 else 0.0
    content = format_weight(weight).center(layout.cell) if layout.values else None
    if not use_colour:
        return Text(content or shade(relative) * layout.cell)
    style = Style(bgcolor=colour(relative), color=palette.ink(relative))
    return Text(content or " " * layout.cell, style=style)


def heatmap_panel(
    matrix: np.ndarray,
    query_labels: Sequence[str],
    key_labels: Sequence[str],
    *,
    title: str,
    layout: Layout,
    scale: float,
    use_colour: bool,
    highlight_row: int | None = None,
) -> Panel:
    """One labelled heatmap: ``matrix`` is (query tokens, key tokens), already pooled.

    ``highlight_row`` marks one query row (an explorer's cursor) by its label.
    """
    lines = _header(key_labels, layout)
    for number, (label, row) in enumerate(zip(query_labels, matrix, strict=True)):
        line = fit(label, layout.row_label)
        if number == highlight_row:
            line.stylize("reverse bold")
        for weight in row:
            line.append(" ")
            line.append_text(_cell(float(weight), scale, layout, use_colour))
        lines.append(line)
    return Panel(Group(*lines), title=title, expand=False, padding=(0, 1))


def legend(scale: float, use_colour: bool, rows_are_distributions: bool) -> Text:
    line = Text("0 ")
    if use_colour:
        for step in range(16):
            line.append(" ", style=Style(bgcolor=colour(step / 15)))
    else:
        line.append(_SHADES.strip())
    line.append(f" {scale:.2f}   colour scale shared by all panels")
    if rows_are_distributions:
        line.append("; each row sums to 1")
    return line


def render(
    maps: AttentionMaps,
    *,
    width: int,
    use_colour: bool,
    values: bool = False,
    highlight_query: int | None = None,
    panels: Sequence[MapPanel] | None = None,
) -> RenderableType:
    """Every selected head of ``maps`` as panels fitted to ``width`` columns, with a legend.

    ``highlight_query`` marks one query token's row in every panel. ``panels``
    draws only those maps, in that order (the heads worth looking at first).
    """
    shown = list(panels_of(maps)) if panels is None else list(panels)
    query_labels = [spaces_shown(token) for token in query_labels_of(maps)]
    key_labels = [spaces_shown(token) for token in maps.key_tokens]
    layout = choose_layout(query_labels, key_labels, width, values)
    pooled = [(title, pool_map(matrix, layout.pool)) for _, _, title, matrix in shown]
    # The scale of what is drawn: pooled cells hold sums of columns, larger than any weight.
    scale = max((float(matrix.max()) for _, matrix in pooled if matrix.size), default=1.0)
    pooled_queries = pool_labels(query_labels, layout.pool)
    pooled_keys = pool_labels(key_labels, layout.pool)
    drawn = [
        heatmap_panel(
            matrix,
            pooled_queries,
            pooled_keys,
            title=title,
            layout=layout,
            scale=scale,
            use_colour=use_colour,
            highlight_row=None if highlight_query is None else highlight_query // layout.pool,
        )
        for title, matrix in pooled
    ]
    widest_title = max(cell_len(title) for _, _, title, _ in shown)
    panel_width = max(layout.panel_width(len(pooled_keys)), widest_title + _TITLE_FRAME)
    per_row = max(1, width // panel_width)
    grid = Table.grid(padding=(0, 0))
    for _ in range(per_row):
        grid.add_column()
    for start in range(0, len(drawn), per_row):
        grid.add_row(*drawn[start : start + per_row])
    notes = [Text(_summary(maps), style="bold")]
    if layout.pool > 1:
        notes.append(
            Text(
                f"pooled to fit {width} columns: every {layout.pool} neighbouring tokens form one"
                " cell (rows averaged, columns summed; a label is the group's first token, + marks"
                " a group)"
            )
        )
    if values and not layout.values:
        notes.append(Text("--values: cells too narrow for numbers at this width"))
    return Group(*notes, grid, legend(scale, use_colour, _rows_sum_to_one(maps)))


def _summary(maps: AttentionMaps) -> str:
    summary = f"{display_label(maps.model)} · {maps.mode} attention"
    if maps.aggregate:
        summary += f" · {maps.aggregate}"
    rows, columns = len(maps.query_tokens), len(maps.key_tokens)
    keys = f"columns: {columns} key token{'s' * (columns > 1)}"
    if maps.query_positions is None:
        summary += f" · rows: {rows} query token{'s' * (rows > 1)}, {keys}"
    else:  # the context names the rows kept
        summary += f" · {keys}"
    return summary + notes_of(maps)


def _rows_sum_to_one(maps: AttentionMaps) -> bool:
    return not (maps.aggregate or "").startswith("max") and maps.weighting is None


_HALF_BLOCK = "▀"  # foreground paints the upper cell, background the lower: square cells
_GRID_SUMMARY_LINES = 3  # summary, head labels, legend
_MAX_THUMBNAIL = 16  # characters: an overview, not a panel


@dataclass(frozen=True)
class Thumbnails:
    """How the maps of a grid become thumbnails of the same size."""

    pool: int  # tokens per pooled cell
    grow: int  # pixels per cell along each side (small maps are drawn larger)
    colour: bool  # two pixel rows per line (half blocks); else one row of shades

    @property
    def pixel_width(self) -> int:  # characters per pixel: shade characters are half as wide
        return 1 if self.colour else 2

    def size(self, queries: int, keys: int) -> tuple[int, int]:
        """Characters and lines a map's thumbnail takes."""
        rows = -(-queries // self.pool) * self.grow
        columns = -(-keys // self.pool) * self.grow
        return columns * self.pixel_width, -(-rows // 2) if self.colour else rows

    def lines(self, matrix: np.ndarray, scale: float) -> list[Text]:
        pixels = np.repeat(np.repeat(pool_map(matrix, self.pool), self.grow, 0), self.grow, 1)
        relative = pixels / scale if scale > 0 else np.zeros_like(pixels)
        if not self.colour:
            return [Text("".join(shade(float(w)) * 2 for w in row)) for row in relative]
        out = []
        for top in range(0, relative.shape[0], 2):
            upper = relative[top]
            lower = relative[top + 1] if top + 1 < relative.shape[0] else None
            runs = []
            for column, weight in enumerate(upper):
                below = None if lower is None else colour(float(lower[column]))
                runs.append(Style(color=colour(float(weight)), bgcolor=below))
            line = Text()
            for style, run in _runs(runs):
                line.append(_HALF_BLOCK * run, style=style)
            out.append(line)
        return out


def _runs(styles: list[Style]) -> list[tuple[Style, int]]:
    """Neighbouring equal styles joined: one escape sequence per run, not per character."""
    runs: list[tuple[Style, int]] = []
    for style in styles:
        if runs and runs[-1][0] == style:
            runs[-1] = (style, runs[-1][1] + 1)
        else:
            runs.append((style, 1))
    return runs


def choose_thumbnails(
    queries: int, keys: int, width: int, lines: int | None, colour: bool
) -> Thumbnails:
    """The largest thumbnails of ``queries`` × ``keys`` maps that fit ``width``
    characters and ``lines`` lines (square when ``lines`` is None)."""
    pixel_width = 1 if colour else 2
    across = max(1, min(width, _MAX_THUMBNAIL) // pixel_width)
    down = across if lines is None else max(1, lines * (2 if colour else 1))
    room = min(across, down)
    pool = max(1, math.ceil(max(queries, keys) / room))
    cells = -(-max(queries, keys) // pool)
    return Thumbnails(pool=pool, grow=max(1, room // cells), colour=colour)


def _grid_labels(maps: AttentionMaps) -> tuple[list[str], list[str]]:
    """Labels of the grid's rows (layers) and columns (heads)."""
    if maps.aggregate is None:
        return [f"L{layer}" for layer in maps.layers], [f"H{head}" for head in maps.heads]
    row_labels = ["all"] if maps.aggregate.folds_layers else [f"L{layer}" for layer in maps.layers]
    return row_labels, [maps.aggregate.value]


def render_grid(
    maps: AttentionMaps,
    *,
    width: int,
    height: int | None = None,
    use_colour: bool,
    highlight: tuple[int, int] | None = None,
    values: bool = False,
) -> RenderableType:
    """Every map as a small thumbnail, layers as rows and heads as columns, fitted to
    ``width`` × ``height`` characters (any height when None): the overview of a whole
    model on one screen. Thumbnails are colour only; tokens are pooled when a map has
    more than a thumbnail's cells. ``highlight`` marks one (layer, head) by its labels.
    ``values`` (asked for panels that did not fit) adds a note that it has no numbers.
    """
    row_labels, column_labels = _grid_labels(maps)
    label_width = max(map(len, row_labels)) + 1
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    room_across = max(2, (width - label_width) // len(column_labels) - 1)  # a space between
    room_down = None
    if height is not None:  # a blank line between layers
        room_down = max(1, (height - _GRID_SUMMARY_LINES - 1) // len(row_labels) - 1)
    thumbnails = choose_thumbnails(queries, keys, room_across, room_down, use_colour)
    thumbnail_width, _ = thumbnails.size(queries, keys)
    column_width = max(thumbnail_width, max(map(len, column_labels))) + 1
    grid = maps.weights.reshape(len(row_labels), len(column_labels), queries, keys)
    # The scale of what is drawn: pooled cells hold sums of columns.
    scale = max(
        float(pool_map(matrix, thumbnails.pool).max()) for layer in grid for matrix in layer
    )
    selected: tuple[int | None, int | None] = (None, None)
    if highlight is not None and maps.aggregate is None:
        selected = (maps.layers.index(highlight[0]), maps.heads.index(highlight[1]))
    header = Text(" " * label_width)
    for number, label in enumerate(column_labels):
        header.append_text(fit(label, column_width))
        if number == selected[1]:
            header.stylize(
                "reverse bold", len(header) - column_width, len(header) - column_width + len(label)
            )
    body = [Text(_summary(maps), style="bold"), header]
    for number, (label, layer) in enumerate(zip(row_labels, grid, strict=True)):
        drawn = [thumbnails.lines(matrix, scale) for matrix in layer]
        for line_number in range(len(drawn[0])):
            line = fit(label if line_number == 0 else "", label_width)
            if line_number == 0 and number == selected[0]:
                line.stylize("reverse bold", 0, len(label))
            for thumbnail in drawn:
                line.append_text(thumbnail[line_number])
                line.append(" " * (column_width - thumbnail_width))
            line.rstrip()
            body.append(line)
        if number + 1 < len(row_labels):
            body.append(Text(""))
    if thumbnails.pool > 1:
        body.append(
            Text(
                f"pooled to fit: every {thumbnails.pool} neighbouring tokens form one cell "
                "(rows averaged, columns summed)"
            )
        )
    if values:
        body.append(Text("--values: thumbnails have no numbers (--view panels prints them)"))
    body.append(legend(scale, use_colour, _rows_sum_to_one(maps)))
    return Group(*body)
