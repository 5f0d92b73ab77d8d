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
    notes = [Text(summary(maps), style="bold")]
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
    return Group(*notes, grid, legend(scale, use_colour, rows_sum_to_one(maps)))


def summary(maps: AttentionMaps) -> str:
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


def rows_sum_to_one(maps: AttentionMaps) -> bool:
    return not (maps.aggregate or "").startswith("max") and maps.weighting is None
