"""Effects drawn in diverging colours centred on 0 (red: the answer's metric rises,
blue: it falls): a trace's layers × tokens, in the terminal or as a picture for a paper,
and a heads table's layers × heads grid of one effect (the IOI paper's figure)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import Output
from attnviz.errors import UsageError
from attnviz.render.figures import saved
from attnviz.render.style import Style, token_label
from attnviz.selection import index_span

if TYPE_CHECKING:
    from rich.console import RenderableType

    from attnviz.analysis.effects import Answer, HeadEffects, Knockout
    from attnviz.analysis.trace import Trace

_WHITE, _RED, _BLUE = (
    np.array([245, 245, 245.0]),
    np.array([178, 24, 43.0]),
    np.array([33, 102, 172.0]),
)
DEFAULT_STYLE = Style()
_LAYER_LABEL = 9  # "layer 29 "
_CELL = 7  # characters of a token's column: "+0.123 "


def diverging(value: float, largest: float) -> tuple[int, int, int]:
    """The colour of ``value`` on a scale from -``largest`` (blue) through 0 (white) to
    ``largest`` (red), as 0–255 channels."""
    share = 0.0 if largest == 0 else max(-1.0, min(1.0, value / largest))
    end = _RED if share >= 0 else _BLUE
    red, green, blue = (round(channel) for channel in _WHITE + abs(share) * (end - _WHITE))
    return red, green, blue


def diverging_palette(levels: int = 256) -> list[tuple[int, int, int]]:
    """The diverging scale as ``levels`` colours from -1 to 1, for the page's script."""
    return [diverging(2 * level / (levels - 1) - 1, 1.0) for level in range(levels)]


def metric_of(on: Answer) -> str:
    """What the effects measure: the measure's label, with the tokens in it."""
    return on.metric_label


_LONGEST_TEXT = 40  # characters of the text a picture's title quotes


def _read(on: Answer) -> str:
    """What an answer picture is of: the text (its start, where long) and the answer token
    read after it."""
    if on.text is None:
        return f"answer {on.answer_token!r}"
    text = " ".join(on.text.split())
    if len(text) > _LONGEST_TEXT:
        text = text[: _LONGEST_TEXT - 1] + "…"
    return f"{text!r} → {on.answer_token!r}"


def _title(trace: Trace) -> str:
    on = trace.on
    return (
        f"{trace.model} · trace at {trace.site.value}"
        + (" by position" if trace.by_position else "")
        + f" · answer {on.answer_token!r} · "
        f"{metric_of(on)}: "
        f"clean {on.clean_metric:z.3f}, corrupted {on.corrupt_metric:z.3f}"
        + (" · gradient estimate" if on.method.value == "gradient" else "")
        + (" · as the fraction recovered" if on.normalized else "")
    )


def binned(effect: np.ndarray, columns: int) -> tuple[np.ndarray, int]:
    """The effect with neighbouring positions binned so that at most ``columns`` remain:
    each bin shows its position of the largest magnitude, and the bin size."""
    size = max(1, -(-effect.shape[1] // max(1, columns)))
    if size == 1:
        return effect, 1
    padded = np.pad(effect, ((0, 0), (0, -effect.shape[1] % size)))
    grouped = padded.reshape(effect.shape[0], -1, size)
    picked = np.abs(grouped).argmax(-1)
    return np.take_along_axis(grouped, picked[..., None], -1)[..., 0], size


def trace_table(trace: Trace, width: int) -> RenderableType:
    """The trace as rich text: a row per layer (and head), a column per token (binned to
    fit) or per head."""
    from rich.color import Color
    from rich.console import Group
    from rich.style import Style
    from rich.text import Text

    rows, headers, values = trace.grid()
    label_width = max(_LAYER_LABEL, max(map(len, rows)) + 2)
    columns = max(1, (width - label_width) // _CELL)
    effect, size = binned(values, columns)
    largest = float(np.abs(values).max())
    lines = [Text(_title(trace))]
    if size > 1:
        lines.append(Text(f"{size} positions per column, each showing its largest effect"))
    header = Text(" " * label_width)
    for column in range(effect.shape[1]):
        label = (
            headers[column * size] if headers is not None
            else token_label(trace.tokens[column * size]) if size == 1
            else str(column * size)
        )  # fmt: skip
        header.append(label[: _CELL - 1].ljust(_CELL))
    lines.append(header)
    for label, row in zip(rows, effect, strict=True):
        line = Text(label.ljust(label_width))
        for value in row:
            red, green, blue = diverging(float(value), largest)
            ink = "black" if red + green + blue > 380 else "white"
            style = Style(color=Color.parse(ink), bgcolor=Color.from_rgb(red, green, blue))
            line.append(f"{value:+z.3f}"[: _CELL - 1].rjust(_CELL - 1), style=style)
            line.append(" ")
        lines.append(line)
    said = (
        "effect: the fraction of the corruption's change that restoring the clean activation "
        "there brings back, (restored - corrupted) / (clean - corrupted)"
        if trace.on.normalized
        else "effect: the metric with the clean activation restored there, less the corrupted run's"
    )
    lines.append(Text(said))
    return Group(*lines)


def trace_picture(trace: Trace, picture: Output, style: Style = DEFAULT_STYLE) -> bytes:
    """The trace as a picture: layers (and heads) × tokens, the tokens labelled, those the
    corrupted text changed marked with an asterisk (as ROME's figures mark the subject);
    or layers × heads."""
    rows, headers, values = trace.grid()
    step = max(1, values.shape[1] // 120)
    changed = [
        token_label(token) + ("*" if token != corrupt else "")
        for token, corrupt in zip(trace.tokens, trace.corrupt_tokens, strict=True)
    ]
    return _diverging_picture(
        values,
        rows=[row.removeprefix("layer ") for row in rows],
        ylabel="layer, head" if trace.by_position else "layer",
        columns=(changed if headers is None else headers)[::step],
        column_step=step,
        title=style.titles(_title(trace)),
        unit=effect_unit(trace.on, "effect"),
        picture=picture,
        style=style,
        xlabel="* changed in the corrupted text" if headers is None else "",
    )


def effects_picture(
    effects: HeadEffects,
    column: str,
    model: str,
    picture: Output,
    style: Style = DEFAULT_STYLE,
) -> bytes:
    """One effect of every head (ablation, dla or patch) as a layers × heads grid."""
    grid = {"ablation": effects.ablation, "dla": effects.dla, "patch": effects.patch}[column]
    if grid is None:
        raise UsageError(f"these effects have no {column}: {_LEFT_OUT[column]}")
    on = effects.on
    named = f"{effects.ablate} ablation" if column == "ablation" else column
    title = " · ".join(part for part in (model, _read(on), named) if part)
    title += f" · {metric_of(on)}"
    if on.method.value == "gradient":
        title += " · gradient estimate"
    return _diverging_picture(
        grid,
        rows=[str(layer) for layer in effects.layers],
        columns=[str(head) for head in effects.heads],
        column_step=1,
        title=style.titles(title),
        unit=effect_unit(on, column),
        picture=picture,
        style=style,
        xlabel="head",
        rotation=0,
    )


_LEFT_OUT = {  # why a run's effects leave a column out
    "ablation": "--ablate none leaves it out",
    "dla": "the metric is not linear in the logits, so no direction to attribute along",
    "patch": "patch needs a corrupted text",
}


def effect_unit(on: Answer, column: str) -> str:
    """What a colour bar's numbers are: a change in the metric, or a logit attribution."""
    if column == "dla":
        return "direct logit attribution (logits)"
    if on.normalized and column in ("patch", "effect"):
        return "fraction of the corruption's change recovered"
    return on.unit()


def _diverging_picture(
    grid: np.ndarray,
    *,
    rows: list[str],
    columns: list[str],
    column_step: int,
    title: str,
    unit: str,
    picture: Output,
    style: Style,
    xlabel: str = "",
    ylabel: str = "layer",
    rotation: int = 90,
) -> bytes:
    """A (rows, columns) grid in diverging colours centred on 0, with a colour bar that
    says what the numbers are; sized, titled and lettered as ``style`` says."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height, width = grid.shape
    size = style.figsize or (min(40.0, 2.2 + 0.32 * width), 1.6 + 0.28 * height)
    small = style.font_size or 7
    figure = Figure(figsize=size, dpi=style.dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    largest = float(np.abs(grid).max()) or 1.0
    image = axes.imshow(
        grid,
        cmap=matplotlib.colormaps["RdBu_r"],
        vmin=-largest,
        vmax=largest,
        interpolation="nearest",
        aspect="auto",
    )
    axes.set_xticks(range(0, width, column_step), columns, rotation=rotation, fontsize=small)
    axes.set_yticks(range(height), rows, fontsize=small)
    axes.set_ylabel(ylabel, fontsize=small + 1)
    axes.set_xlabel(xlabel, fontsize=small + 1)
    if title:
        axes.set_title(wrapped(title, int(figure.get_figwidth() * 11)), fontsize=small + 1)
    bar = figure.colorbar(image, ax=axes)
    bar.ax.tick_params(labelsize=small)
    bar.set_label(unit, fontsize=small)
    return saved(figure, picture)


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def wrapped(title: str, width: int) -> str:
    """``title`` in lines of about ``width`` characters, never broken inside a quoted
    token (``logit(' Paris')`` stays whole): a quote's spaces are held together."""
    held = _QUOTED.sub(lambda found: found[0].replace(" ", "\u00a0"), title)
    lines = textwrap.wrap(held, width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines).replace("\u00a0", " ")


def knockout_picture(knockout: Knockout, picture: Output, style: Style = DEFAULT_STYLE) -> bytes:
    """A bar per layer: the change in the answer's log-probability with the query rows
    kept from the span's keys in that layer's window, blue where it falls, red where it
    rises (the diverging scale's ends)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    count = len(knockout.layers)
    small = style.font_size or 7
    figure = Figure(figsize=style.figsize or (5.0, 1.2 + 0.22 * count), dpi=style.dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colours = [np.array(diverging(float(sign), 1.0)) / 255 for sign in np.sign(knockout.change)]
    axes.barh(range(count), knockout.change, color=colours)
    axes.set_yticks(range(count), [str(layer) for layer in knockout.layers], fontsize=small)
    axes.invert_yaxis()
    axes.axvline(0, color="#555555", linewidth=0.6)
    axes.tick_params(axis="x", labelsize=small)
    axes.set_ylabel(f"layer (a window of {knockout.window})", fontsize=small + 1)
    axes.set_xlabel("change in log-probability (nats)", fontsize=small + 1)
    default = (
        f"answer {knockout.answer_token!r} · rows {index_span(knockout.rows)} may not read "
        f"keys {index_span(knockout.span)}"
    )
    title = style.titles(default)
    if title:
        axes.set_title(wrapped(title, int(figure.get_figwidth() * 11)), fontsize=small + 1)
    return saved(figure, picture)
