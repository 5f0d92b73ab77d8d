"""The logit lens drawn: a row per layer, a column per position, each cell the token that
layer would predict there, shaded by its probability; in the terminal or as a picture."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import Output
from attnviz.render.effects import DEFAULT_STYLE, wrapped
from attnviz.render.figures import saved
from attnviz.render.style import Style, token_label
from attnviz.safe_text import spaces_shown

if TYPE_CHECKING:
    from rich.console import RenderableType

    from attnviz.analysis.lens import Lens

_CELL = 9  # characters of a column: a predicted token, cut to 8


def _title(lens: Lens) -> str:
    said = "" if lens.answer_token is None else f" · answer {lens.answer_token!r}"
    return f"{lens.model} · logit lens: each layer's likeliest next token{said}"


def lens_table(lens: Lens, width: int) -> RenderableType:
    """The lens as rich text: a row per layer, a column per position (the last that fit),
    each cell's token on a shade of its probability (darker: likelier)."""
    from rich.color import Color
    from rich.console import Group
    from rich.style import Style as Ink
    from rich.text import Text

    label = len(f"layer {max(lens.layers, default=0)} ")  # the widest row's label, aligned
    columns = max(1, (width - label) // _CELL)
    first = max(0, len(lens.tokens) - columns)
    lines = [Text(_title(lens))]
    if first:
        lines.append(Text(f"positions {first} to {len(lens.tokens) - 1} (the last that fit)"))
    header = Text(" " * label)
    for token in lens.tokens[first:]:
        header.append(token_label(token)[: _CELL - 1].ljust(_CELL))
    lines.append(header)
    for row, layer in enumerate(lens.layers):
        line = Text(f"layer {layer}".ljust(label))
        for position in range(first, len(lens.tokens)):
            shade = int(255 - 200 * float(lens.probability[row, position]))
            style = Ink(
                color=Color.parse("black" if shade > 130 else "white"),
                bgcolor=Color.from_rgb(shade, 255 if shade > 130 else shade, shade),
            )
            cell = spaces_shown(lens.top[row][position])[: _CELL - 1]
            line.append(cell.ljust(_CELL - 1), style=style)
            line.append(" ")
        lines.append(line)
    lines.append(
        Text(
            "a cell: the token that layer's residual stream predicts next there, "
            "shaded by its probability (darker: likelier)"
        )
    )
    if lens.answer is not None:
        best = np.unravel_index(int(np.argmax(lens.answer)), lens.answer.shape)
        lines.append(Text(
            f"the answer {lens.answer_token!r} is likeliest at layer {lens.layers[best[0]]}, "
            f"position {best[1]}: log-probability {float(lens.answer[best]):z.3f}; at the last "
            f"position, layer by layer: "
            + ", ".join(f"{value:z.2f}" for value in lens.answer[:, -1])
        ))  # fmt: skip
    return Group(*lines)


def lens_picture(lens: Lens, picture: Output, style: Style = DEFAULT_STYLE) -> bytes:
    """The lens as a picture: layers × positions in the top token's probability, each
    cell labelled with its token where the cells are wide enough."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height, width = lens.probability.shape
    size = style.figsize or (min(40.0, 2.5 + 0.55 * width), 1.6 + 0.3 * height)
    small = style.font_size or 7
    figure = Figure(figsize=size, dpi=style.dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(
        lens.probability, cmap=matplotlib.colormaps["Greens"], vmin=0, vmax=1,
        interpolation="nearest", aspect="auto",
    )  # fmt: skip
    if width <= 60:
        for row in range(height):
            for position in range(width):
                ink = "white" if lens.probability[row, position] > 0.6 else "black"
                label = spaces_shown(lens.top[row][position])[:8]
                axes.text(position, row, label, ha="center", va="center",
                          fontsize=max(4, small - 2), color=ink)  # fmt: skip
    step = max(1, width // 120)
    labels = [token_label(token) for token in lens.tokens]
    axes.set_xticks(range(0, width, step), labels[::step], rotation=90, fontsize=small)
    axes.set_yticks(range(height), [str(layer) for layer in lens.layers], fontsize=small)
    axes.set_ylabel("layer", fontsize=small + 1)
    title = style.titles(_title(lens))
    if title:
        axes.set_title(wrapped(title, int(figure.get_figwidth() * 11)), fontsize=small + 1)
    bar = figure.colorbar(image, ax=axes)
    bar.ax.tick_params(labelsize=small)
    bar.set_label("probability of the top token", fontsize=small)
    return saved(figure, picture)
