"""The picture of ``needle --picture``: the lengths × depths grid of answered cells (the
classic needle-in-a-haystack chart) beside the top retrieval heads' scores."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import Output
from attnviz.render.canvas import drawing, metadata

if TYPE_CHECKING:
    from attnviz.needle import NeedleResults

ANSWERED, MISSED = "#3b8c4a", "#c8473d"  # green and red that stay apart for most eyes' grey


def needle_picture(results: NeedleResults, picture: Output, top: int) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure

    lengths, depths = results.sweep.lengths, results.sweep.depths
    heads = results.heads()[:top]
    width = max(3.0, 0.7 * len(depths) + 1.6)
    height = max(2.6, 0.45 * max(len(lengths), len(heads)) + 1.4)
    figure = Figure(figsize=(width + 4.2, height), dpi=100)
    FigureCanvasAgg(figure)
    grid_axes, heads_axes = figure.subplots(1, 2, width_ratios=[width, 4.2])
    grid_axes.imshow(
        results.grid(),
        cmap=ListedColormap([MISSED, ANSWERED]),
        vmin=0,
        vmax=1,
        interpolation="nearest",
        aspect="auto",
    )
    for row, column in np.ndindex(results.grid().shape):
        mark = "✓" if results.grid()[row, column] == 1 else "✗"
        grid_axes.text(column, row, mark, ha="center", va="center", color="white", fontsize=11)
    grid_axes.set_xticks(range(len(depths)), [f"{depth:g}" for depth in depths], fontsize=8)
    grid_axes.set_yticks(range(len(lengths)), [f"{length:,}" for length in lengths], fontsize=8)
    grid_axes.set_xlabel("depth of the needle (0: start, 1: end)", fontsize=8)
    grid_axes.set_ylabel("prompt length (tokens)", fontsize=8)
    grid_axes.set_title(
        f"answered {sum(cell.answered for cell in results.cells)} of {len(results.cells)}",
        fontsize=9,
    )
    positions = np.arange(len(heads))
    retrieval = [score.retrieval or 0.0 for score in heads]
    heads_axes.barh(positions - 0.2, retrieval, height=0.4, color="#3d6fb6", label="retrieval")
    heads_axes.barh(
        positions + 0.2, [score.span for score in heads], height=0.4, color="#b0b8c4", label="span"
    )
    heads_axes.set_yticks(
        positions, [f"L{score.layer} H{score.head}" for score in heads], fontsize=8
    )
    heads_axes.invert_yaxis()
    heads_axes.set_xlim(0, 1)
    heads_axes.tick_params(axis="x", labelsize=7)
    heads_axes.set_title(f"top {len(heads)} retrieval heads", fontsize=9)
    heads_axes.legend(fontsize=7, loc="lower right", frameon=False)
    figure.suptitle(f"{results.model} · needle: {results.sweep.needle.needle}", fontsize=9)
    figure.subplots_adjust(left=0.1, right=0.97, bottom=0.16, top=0.8, wspace=0.35)
    out = io.BytesIO()
    with drawing(set()):
        figure.savefig(out, format=picture.value, metadata=metadata(picture))
    return out.getvalue()
