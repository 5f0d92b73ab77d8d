"""The picture of ``stats --picture``: a layers × heads heatmap of each statistic's
corpus mean, side by side."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import Output
from attnviz.render.figures import saved

if TYPE_CHECKING:
    from attnviz.analysis.corpus import CorpusStatistics


def statistics_picture(corpus: CorpusStatistics, picture: Output) -> bytes:
    """A layers × heads heatmap of each statistic's corpus mean, side by side."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = corpus.statistics()
    layers, heads, _ = corpus.means(names[0])
    panel = (max(2.2, 0.35 * len(heads) + 1.2), max(1.8, 0.3 * len(layers) + 1.0))
    grid_rows = math.ceil(len(names) / 3)
    figure = Figure(figsize=(panel[0] * 3, panel[1] * grid_rows + 0.6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(grid_rows, 3, squeeze=False)
    for ax in axes.flat[len(names) :]:  # a last row that is not full
        ax.set_axis_off()
    for ax, name in zip(axes.flat, names, strict=False):
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
    figure.suptitle(f"{corpus.model} · corpus means over {corpus.inputs} inputs", fontsize=10)
    figure.subplots_adjust(left=0.06, right=0.97, bottom=0.1, top=0.86, wspace=0.45, hspace=0.6)
    return saved(figure, picture, laid_out=True)
