"""The picture of ``needle --picture``: the lengths × depths grid of answered cells (the
classic needle-in-a-haystack chart) beside the top retrieval heads' scores, and with
``--top-heads`` those heads' strips in one cell: where each looks while the model
writes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import Output
from attnviz.render.figures import saved
from attnviz.render.style import Style
from attnviz.safe_text import spaces_shown

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from attnviz.needle import Cell, HeadScore, NeedleResults

ANSWERED, MISSED = "#3b8c4a", "#c8473d"  # green and red that stay apart for most eyes' grey
NEEDLE_MARK = "#e0457b"  # the needle's bins, on viridis's blues and yellows
SWEEP_HEIGHT = 2.6  # inches: the grid and the bars, at least
DEFAULT_STYLE = Style()


class _Points:
    """A size in points, scaled as the picture's lettering asks (font_size / 8)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, points: float) -> float:
        return points * self.scale


STRIP_INCHES_PER_ROW = 0.13  # a strip's row (a token written), for its label


def needle_picture(
    results: NeedleResults,
    picture: Output,
    top: int,
    top_heads: int = 0,
    style: Style = DEFAULT_STYLE,
) -> bytes:
    """The sweep's picture; with ``top_heads``, the strips of that many of the best
    retrieval heads in the cell whose rows were kept. ``style`` gives its dpi, size (the
    sweep's own by default), lettering (``font_size``: the labels' size, 8 points by
    default, the rest in proportion) and title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lengths, depths = results.sweep.lengths, results.sweep.depths
    heads = results.heads()[:top]
    width = max(3.0, 0.7 * len(depths) + 1.6)
    height = max(SWEEP_HEIGHT, 0.45 * max(len(lengths), len(heads)) + 1.4)
    drawn = next((cell for cell in results.cells if cell.strips is not None), None)
    stripped = results.heads()[:top_heads] if drawn is not None else []
    strip_count = len(stripped)
    strip_height = 0.0
    if drawn is not None and drawn.strips is not None:
        strip_height = max(0.9, STRIP_INCHES_PER_ROW * len(drawn.strips.written) + 0.5)
    size = style.figsize or (width + 4.2, height + strip_count * strip_height)
    figure = Figure(figsize=size, dpi=style.dpi)
    points = _Points((style.font_size or 8) / 8)
    FigureCanvasAgg(figure)
    rows = figure.add_gridspec(
        1 + strip_count, 2, width_ratios=[width, 4.2],
        height_ratios=[height, *[strip_height] * strip_count], hspace=0.7, wspace=0.35,
    )  # fmt: skip
    _grid(figure.add_subplot(rows[0, 0]), results, points)
    _bars(figure.add_subplot(rows[0, 1]), heads, points)
    for number, score in enumerate(stripped):
        assert drawn is not None
        axes = figure.add_subplot(rows[1 + number, :])
        last = number == strip_count - 1
        _strip(axes, drawn, score, points, first=number == 0, last=last)
    title = style.titles(f"{results.model} · needle: {results.sweep.needle.needle}")
    if title:
        figure.suptitle(title, fontsize=points(9))
    total = height + strip_count * strip_height
    figure.subplots_adjust(left=0.1, right=0.97, bottom=0.42 / total + 0.02, top=1 - 0.52 / total)
    return saved(figure, picture, laid_out=True)


def _grid(axes: Axes, results: NeedleResults, points: _Points) -> None:
    """Answered (green ✓) and missed (red ✗) cells, lengths down and depths across."""
    from matplotlib.colors import ListedColormap

    lengths, depths = results.sweep.lengths, results.sweep.depths
    axes.imshow(
        results.grid(),
        cmap=ListedColormap([MISSED, ANSWERED]),
        vmin=0,
        vmax=1,
        interpolation="nearest",
        aspect="auto",
    )
    for row, column in np.ndindex(results.grid().shape):
        mark = "✓" if results.grid()[row, column] == 1 else "✗"
        axes.text(column, row, mark, ha="center", va="center", color="white", fontsize=points(11))
    axes.set_xticks(range(len(depths)), [f"{depth:g}" for depth in depths], fontsize=points(8))
    axes.set_yticks(range(len(lengths)), [f"{length:,}" for length in lengths], fontsize=points(8))
    axes.set_xlabel("depth of the needle (0: start, 1: end)", fontsize=points(8))
    axes.set_ylabel("prompt length (tokens)", fontsize=points(8))
    axes.set_title(
        f"answered {sum(cell.answered for cell in results.cells)} of {len(results.cells)}",
        fontsize=points(9),
    )


def _bars(axes: Axes, heads: list[HeadScore], points: _Points) -> None:
    """Each head's retrieval score and span mass, the best retriever on top."""
    positions = np.arange(len(heads))
    retrieval = [score.retrieval or 0.0 for score in heads]
    axes.barh(positions - 0.2, retrieval, height=0.4, color="#3d6fb6", label="retrieval")
    axes.barh(
        positions + 0.2, [score.span for score in heads], height=0.4, color="#b0b8c4", label="span"
    )
    axes.set_yticks(
        positions, [f"L{score.layer} H{score.head}" for score in heads], fontsize=points(8)
    )
    axes.invert_yaxis()
    axes.set_xlim(0, 1)
    axes.tick_params(axis="x", labelsize=points(7))
    axes.set_title(f"top {len(heads)} retrieval heads", fontsize=points(9))
    axes.legend(fontsize=points(7), loc="lower right", frameon=False)


def _strip(
    axes: Axes, cell: Cell, score: HeadScore, points: _Points, first: bool, last: bool
) -> None:
    """One head's rows in ``cell``: a row per token written, the prompt across in bins
    (the weight on each bin's tokens), the needle's bins marked above."""
    strips = cell.strips
    assert strips is not None
    rows = strips.weights[:, score.layer, score.head]  # (G, B)
    edges = strips.edges
    axes.imshow(
        rows, cmap="viridis", vmin=0, vmax=1, aspect="auto", interpolation="nearest",
        extent=(0, edges[-1], len(rows), 0),
    )  # fmt: skip
    low, high = cell.needle
    axes.axvspan(
        edges[strips.bin_of(low)], edges[strips.bin_of(high - 1) + 1], ymin=1.0, ymax=1.1,
        color=NEEDLE_MARK, clip_on=False,
    )  # fmt: skip
    axes.set_yticks(
        np.arange(len(rows)) + 0.5,
        [spaces_shown(token) for token in strips.written],
        fontsize=points(5),
    )
    axes.tick_params(axis="x", labelsize=points(7))
    retrieval = "–" if score.retrieval is None else f"{score.retrieval:.2f}"
    title = f"L{score.layer} H{score.head} · retrieval {retrieval}"
    if first:
        said = "answered" if cell.answered else "not answered"
        title = (
            f"where they look in the cell of {cell.length:,} tokens at depth {cell.depth:g} "
            f"({said}), a row per token written\n{title}"
        )
    axes.set_title(title, fontsize=points(8), loc="left", pad=9)  # above the needle's mark
    if last:
        size = edges[-1] / (len(edges) - 1)
        tokens = "1 token" if size == 1 else f"{size:.3g} tokens"
        axes.set_xlabel(
            f"prompt position: the weight on each bin of {tokens} (0 to 1), the needle marked "
            "above",
            fontsize=points(7),
        )
