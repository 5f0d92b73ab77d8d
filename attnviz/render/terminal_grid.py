"""The whole model on one screen in the terminal (``--view grid``): every map as a small
thumbnail of half-block cells, layers as rows and heads as columns, colour only, tokens
pooled where a map has more than a thumbnail's cells. The panels of
:mod:`attnviz.render.terminal` give the numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text

from attnviz.analysis.grid import pool_map
from attnviz.render.terminal import colour, fit, legend, rows_sum_to_one, shade, summary

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


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
    header = _header(column_labels, label_width, column_width, selected[1])
    body = [Text(summary(maps), style="bold"), header]
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
    body.append(legend(scale, use_colour, rows_sum_to_one(maps)))
    return Group(*body)


def _header(labels: list[str], indent: int, width: int, selected: int | None) -> Text:
    """The line of column (head) labels over the grid, each ``width`` wide after
    ``indent`` spaces, the ``selected`` one reversed."""
    header = Text(" " * indent)
    for number, label in enumerate(labels):
        header.append_text(fit(label, width))
        if number == selected:
            header.stylize("reverse bold", len(header) - width, len(header) - width + len(label))
    return header
