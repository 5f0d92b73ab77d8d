"""A circuit drawn: its top edges as a table in the terminal; as a picture, the circuit as a
graph (layers bottom to top, heads and MLPs as nodes, an edge's width by |score| and its
colour by sign) beside its faithfulness curve."""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.effects import MEASURE_NAMES
from attnviz.choices import (
    CIRCUIT_METHOD_LABELS,
    INTERVENTIONS,
    MEASURES,
    CircuitMethod,
    Count,
    Level,
    Measure,
    Output,
    Select,
)
from attnviz.render.effects import DEFAULT_STYLE, diverging, wrapped
from attnviz.render.faithfulness_curve import faithfulness_curve, units_of
from attnviz.render.figures import fit_text, saved
from attnviz.render.span_circuit import span_drawing
from attnviz.render.style import Style
from attnviz.safe_text import spaces_shown

if TYPE_CHECKING:
    from rich.console import RenderableType

    from attnviz.circuits.circuit import Circuit
    from attnviz.circuits.training import Training


def circuit_title(circuit: Circuit) -> str:
    steps = f" ({circuit.steps} steps)" if circuit.method is CircuitMethod.IG else ""
    if circuit.training is not None:
        steps = f" (from EAP-IG at {circuit.steps} steps, {circuit.training.steps} training steps)"
    pairs = "" if circuit.pairs == 1 else f", the mean over {circuit.pairs} pairs"
    scored = (
        f"by {circuit.method.value}{steps}"
        if circuit.source is None
        else f"of the scores in {circuit.source}"
    )
    return f"{circuit.model} · circuit {scored}{pairs} · {_measured(circuit)}{_outside(circuit)}"


def _outside(circuit: Circuit) -> str:
    """What an edge outside the circuit carries, where it is not the corrupted run's
    value (the words of its intervention's row)."""
    intervened = INTERVENTIONS[circuit.ablation]
    return "" if intervened.corrupt else f" · every edge outside it carrying {intervened.carried}"


def score_line(circuit: Circuit) -> str:
    """What an edge's score is."""
    if circuit.training is not None:
        return (
            "score: the edge's learned mask (1: it carries its value in the run, 0: the "
            "corrupted run's)"
        )
    carried = INTERVENTIONS[circuit.ablation].carried
    return f"score: the {circuit.answer.unit()} when that edge alone carries {carried}"


def training_line(training: Training, pairs: int) -> str:
    """How the mask was learned: its settings and its loss from the first pass over the
    pairs to the last (each the mean of as many steps as there are pairs)."""
    sized = (
        f"sparsity {training.sparsity:g}"
        if training.sparsity is not None
        else f"{len(training.sizes)} size{'s' if len(training.sizes) != 1 else ''} held, "
        "each pass keeping exactly its size's edges"
    )
    said = f"trained: {training.steps:,} steps at learning rate {training.learning_rate:g}, {sized}"
    window = min(pairs, len(training.losses))
    if not window:
        return said
    first, last = training.losses[:window], training.losses[-window:]
    return (
        f"{said}; loss {sum(first) / window:.4g} → {sum(last) / window:.4g} (means of "
        f"{window} step{'s' if window != 1 else ''})"
    )


def _measured(circuit: Circuit) -> str:
    """What the metric measures: with one pair's tokens, or over pairs in words."""
    name = circuit.answer.metric_name
    if circuit.pairs == 1 or name not in MEASURE_NAMES:
        return circuit.answer.metric_label
    return MEASURES[Measure(name)].label.format(answer="answer", versus="versus")


def faithfulness_lines(circuit: Circuit) -> list[str]:
    """The circuit's faithfulness, and its curve's, in words."""

    def said(value: float | None) -> str:
        if value is None:
            return "not defined (the corruption changes nothing beyond float32 rounding)"
        return f"{value:z.3f}"

    nodes = " nodes" if circuit.level is Level.NODE else ""
    rule = (
        f"{nodes.strip() or 'edges'} of |score| ≥ {circuit.asked:g}"
        if circuit.select is Select.THRESHOLD
        else f"{circuit.select.value} {int(circuit.asked):,}{nodes}"
    )
    pruned = ", dead ends pruned" if circuit.prune else ""
    # MIB's count, where it differs from the model's own
    ungrouped = (
        circuit.scored.count is Count.UNGROUPED and circuit.graph.kv_heads < circuit.graph.heads
    )
    counted = "ungrouped " if ungrouped else ""
    unit = "edges" if circuit.level is Level.NODE else units_of(circuit)  # the graph's
    emptied = INTERVENTIONS[circuit.ablation].emptied
    carried = _outside(circuit).replace(" · ", ", ")
    lines = [
        f"clean {circuit.clean_metric:z.4f}, {emptied} {circuit.corrupt_metric:z.4f}; "
        f"circuit of {circuit.kept:,} of {circuit.scored.counted:,} {counted}{unit} ({rule}{pruned}"
        f"{carried}): faithfulness {said(circuit.faithfulness)}"
    ]
    lines += [
        f"  {point.asked:,} asked ({point.fraction:.1%}){_by(point.select, circuit)}, "
        f"{point.kept:,} kept: faithfulness {said(point.faithfulness)}"
        for point in circuit.curve
    ]
    if circuit.bootstrap is not None:
        held = circuit.scored.scored_edges()
        lines.append(
            f"scores bootstrapped over {circuit.bootstrap} resamples of the pairs: {held:,} "
            f"of {circuit.graph.count:,} edges kept their sign in every one (the rest score 0)"
        )
    areas = circuit.areas
    if areas is not None:
        lines.append(
            f"MIB's areas over its ten fractions: CPR {areas.cpr:z.3f} (under the "
            f"{areas.cpr_select} circuits' curve), CMD {areas.cmd:z.3f} (between the "
            f"{areas.cmd_select} circuits' curve and 1)"
        )
    return lines


def _by(select: Select, circuit: Circuit) -> str:
    """A curve point's selection, where it is not the circuit's own."""
    return "" if select is circuit.select else f" by {select}"


def circuit_table(circuit: Circuit, width: int, rows: int) -> RenderableType:
    """The ``rows`` edges of largest |score| as a rich table, then the faithfulness."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for name, justify in (("#", "right"), ("from", "left"), ("to", "left"), ("score", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    edges = list(islice(circuit.scored.rows(), rows))
    refined = circuit.scored.exact is not None
    if refined:
        table.add_column("exact", justify="center")
    spans = circuit.scored.spans
    if spans:
        table.add_column("where", justify="left")
    largest = max((abs(edge.score) for edge in edges), default=0.0)
    for rank, edge in enumerate(edges, 1):
        red, green, blue = diverging(edge.score, largest)
        cells: list[RenderableType] = [
            str(rank),
            edge.upstream,
            edge.downstream,
            Text(f"{edge.score:+z.4f}", style=f"on rgb({red},{green},{blue})"),
        ]
        if refined:
            cells.append("✓" if edge.exact else "")
        if edge.by_span is not None:
            cells.append(_where(spans, edge.by_span))
        table.add_row(*cells)
    notes = [Text(score_line(circuit)), *(Text(line) for line in faithfulness_lines(circuit))]
    if spans:
        split = "each position its own span" if spans[0] == "0" else ", ".join(spans)
        notes.append(
            Text(
                f"where: the span carrying most of the edge's |score| ({split}), its share of "
                "the spans' |score|s"
            )
        )
    if circuit.method is not CircuitMethod.EXACT and circuit.source is None:
        notes.append(Text(f"{circuit.method.value}: {CIRCUIT_METHOD_LABELS[circuit.method]}"))
    if circuit.training is not None:
        notes.append(Text(training_line(circuit.training, circuit.pairs)))
    return Group(Text(circuit_title(circuit)), table, *notes)


def _where(spans: tuple[str, ...], shares: tuple[float, ...]) -> str:
    """The span of an edge's largest |share| and that share of the |shares|' sum."""
    sizes = np.abs(np.asarray(shares))
    total = float(sizes.sum())
    if total == 0:
        return ""
    most = int(sizes.argmax())
    return f"{spans[most]} {sizes[most] / total:.0%}"


def circuit_layout(circuit: Circuit) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """Where each node is drawn, (x, y): the input at the bottom, each layer's heads on a
    row and its MLP above them, the logits on top; and the head a downstream node is
    drawn at (a query, key or value input at its head; a key/value head's at its first
    query head)."""
    graph = circuit.graph
    middle, mlps = (graph.heads - 1) / 2, graph.heads + 0.5  # the MLPs in a column of their own
    at = {"input": (middle, 0.0), "logits": (middle, 2.0 * graph.layers + 1)}
    for layer in range(graph.layers):
        for head in range(graph.heads):
            at[f"a{layer}.h{head}"] = (float(head), 2.0 * layer + 1)
        at[f"m{layer}"] = (mlps, 2.0 * layer + 1.6)
    drawn_at = {name: graph.drawn_at(name) for name in graph.downstream}
    return at, drawn_at


def circuit_picture(circuit: Circuit, picture: Output, style: Style = DEFAULT_STYLE) -> bytes:
    """The circuit as a graph, and beside it the faithfulness at each size measured."""
    figure, fit_labels = circuit_drawing(circuit, style)
    return saved(figure, picture, then=fit_labels)


def circuit_drawing(circuit: Circuit, style: Style) -> tuple[Any, Callable[[Any], None]]:
    """The circuit's figure, and what fits its node labels, once it is laid out, to the
    room between a head and the next (shrunk, then cut in the middle): no two overlap."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    graph = circuit.graph
    by_spans = circuit.scored.by_spans
    small = int(style.font_size or 7)
    wide = 1.4 * len(circuit.scored.spans) if by_spans else 0.7 * graph.heads
    size = style.figsize or (4.0 + wide + 3.5, 2.0 + 0.45 * graph.layers)
    figure = Figure(figsize=size, dpi=style.dpi)
    FigureCanvasAgg(figure)
    axes, curve = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    _edge_legend(axes, circuit, small)
    if by_spans:  # the spans along the x-axis, each a column of the layers' nodes
        span_drawing(axes, circuit, small)
        _framed(axes, figure, circuit, style, small)
        faithfulness_curve(curve, circuit, small)
        return figure, lambda renderer: None  # its columns name no node: nothing to fit
    at, drawn_at = circuit_layout(circuit)
    used = _edges_drawn(axes, circuit, at, drawn_at)
    index = {name: number for number, name in enumerate(graph.upstream)}
    node_labels = []
    for name, (x, y) in at.items():
        kept = name in used
        axes.scatter([x], [y], s=60 if kept else 8, c="#333333" if kept else "#cccccc", zorder=3)
        if kept and name != "logits":
            promoted = circuit.promoted[index[name]] if circuit.promoted else ""
            label = (
                name
                if not promoted or name == "input"
                else f"{name}\n→{spaces_shown(promoted)[:10]}"
            )
            at_node = {"xytext": (4, 3), "textcoords": "offset points", "zorder": 4}
            node_labels.append(axes.annotate(label, (x, y), fontsize=max(6, small - 1), **at_node))
        elif name == "logits":
            axes.annotate(
                "logits", (x, y), xytext=(4, 3), textcoords="offset points", fontsize=small
            )
    rows = [2 * layer + 1 for layer in range(graph.layers)]
    axes.set_yticks(rows, [f"layer {layer}" for layer in range(graph.layers)], fontsize=small)
    columns = [*range(graph.heads), graph.heads + 0.5]
    labels = [*(f"h{head}" for head in range(graph.heads)), "MLP"]
    axes.set_xticks(columns, labels, fontsize=small)
    axes.set_xlim(-0.8, graph.heads + 1.3)
    axes.set_ylim(-0.6, 2 * graph.layers + 1.6)
    _framed(axes, figure, circuit, style, small)
    faithfulness_curve(curve, circuit, small)

    def fit_labels(renderer: Any) -> None:
        # a label starts 4 points right of its node: it has the rest of the way to the next
        room = axes.transData.transform((1, 0))[0] - axes.transData.transform((0, 0))[0]
        room -= 6 * figure.dpi / 72  # the offset, and 2 points between labels
        for text in node_labels:
            fitted = []
            for line in text.get_text().split("\n"):
                text.set_text(line)
                fit_text(text, renderer, room, text.get_fontsize())
                if text.get_window_extent(renderer).width <= room:  # else left out: the
                    fitted.append(text.get_text())  # axes' ticks name every node anyway
            text.set_text("\n".join(fitted))

    return figure, fit_labels


def _framed(axes: Any, figure: Any, circuit: Circuit, style: Style, small: int) -> None:
    """The graph's axes open at the top and right, under the circuit's title."""
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    title = style.titles(circuit_title(circuit))
    if title:
        axes.set_title(wrapped(title, int(figure.get_figwidth() * 8)), fontsize=small + 1)


def _edges_drawn(
    axes: Any,
    circuit: Circuit,
    at: dict[str, tuple[float, float]],
    drawn_at: dict[str, str],
) -> set[str]:
    """The circuit's edges as arrows, width and colour by score (the strongest on top);
    the nodes they join."""
    edges = circuit.kept_edges()
    largest = max((abs(score) for *_, score in edges), default=0.0) or 1.0
    used = {"input", "logits"}
    for first, then, score in reversed(edges):  # the strongest drawn last, on top
        target = drawn_at[then]
        used |= {first, target}
        (x0, y0), (x1, y1) = at[first], at[target]
        strength = np.sign(score) * (abs(score) / largest) ** 0.5  # the faint ones still seen
        colour = tuple(channel / 255 for channel in diverging(float(strength), 1.0))
        arrow = {
            "arrowstyle": "-|>",
            "color": colour,
            "lw": 0.3 + 3.7 * abs(strength),
            "shrinkA": 0,
            "shrinkB": 0,
            "connectionstyle": "arc3,rad=0.08",
        }
        axes.annotate("", xy=(x1, y1 - 0.12), xytext=(x0, y0 + 0.12), arrowprops=arrow)
    return used


def _edge_legend(axes: Any, circuit: Circuit, small: int) -> None:
    """What an edge's colour says: the sign of its score (its width, how large it is)."""
    from matplotlib.lines import Line2D
    from matplotlib.transforms import offset_copy

    if circuit.training is not None:
        return  # a learned mask's scores have no sign to tell
    carried = INTERVENTIONS[circuit.ablation].carried
    signs = [("rises (score > 0)", 1.0), ("falls (score < 0)", -1.0)]
    handles = []
    for what, sign in signs:
        red, green, blue = (channel / 255 for channel in diverging(sign, 1.0))
        handles.append(Line2D([], [], lw=2, color=(red, green, blue), label=what))
    axes.legend(
        handles=handles,
        title=f"edge colour: the metric, the edge alone carrying {carried}",
        title_fontsize=small - 1,
        fontsize=small - 1,
        loc="upper right",
        bbox_to_anchor=(1.0, 0.0),  # below the heads' names: the graph fills its axes
        bbox_transform=offset_copy(axes.transAxes, axes.figure, y=-2.5 * small, units="points"),
        ncols=2,
        frameon=False,
    )
