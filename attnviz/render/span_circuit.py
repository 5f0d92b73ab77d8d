"""A circuit kept by span drawn as position-aware circuit papers draw theirs: the spans
along the x-axis, each a column holding every layer's heads and MLP (layers up), and
each kept (edge, span) pair a line inside the column of the span it is read at (where
its downstream node reads the upstream one's output: a query's, an MLP's and the
logits' position; a key's or a value's, the key's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.render.effects import diverging

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Circuit

# A span's column: its heads spread over this much of its unit width, its MLP just right
# of them, the gap to the next column what is left.
_HEADS_WIDTH = 0.7
_MLP_AT = 0.8


def span_edges(circuit: Circuit) -> list[tuple[str, str, int, float]]:
    """The circuit's (edge, span) pairs, largest |share| first: (from, to, span, share)."""
    scored, graph = circuit.scored, circuit.graph
    assert scored.by_span is not None and scored.by_spans  # a circuit kept by span
    spans, upstream, downstream = np.nonzero(scored.measured)  # (K, U, N)
    shares = scored.by_span[spans, upstream, downstream]
    order = np.argsort(-np.abs(shares), kind="stable")
    return [
        (
            graph.upstream[upstream[i]],
            graph.downstream[downstream[i]],
            int(spans[i]),
            float(shares[i]),
        )
        for i in order
    ]


def span_layout(circuit: Circuit) -> dict[tuple[str, int], tuple[float, float]]:
    """Where each node is drawn in each span's column, (x, y): span k's column spans
    [k, k + 1); the input at the bottom, each layer's heads on a row and its MLP above
    them, the logits on top."""
    graph = circuit.graph
    step = _HEADS_WIDTH / max(1, graph.heads - 1)
    at: dict[tuple[str, int], tuple[float, float]] = {}
    for span in range(len(circuit.scored.spans)):
        middle = span + _HEADS_WIDTH / 2
        at["input", span] = (middle, 0.0)
        at["logits", span] = (middle, 2.0 * graph.layers + 1)
        for layer in range(graph.layers):
            for head in range(graph.heads):
                at[f"a{layer}.h{head}", span] = (span + head * step, 2.0 * layer + 1)
            at[f"m{layer}", span] = (span + _MLP_AT, 2.0 * layer + 1.6)
    return at


def span_drawing(axes: Any, circuit: Circuit, small: int) -> None:
    """The circuit's (edge, span) pairs as lines in their spans' columns (width and colour
    by share, the strongest on top), every node a dot (the ones they join dark), the
    spans named along the x-axis and the layers up the y-axis (each column a layer's heads
    left to right, then its MLP)."""
    graph = circuit.graph
    at = span_layout(circuit)
    edges = span_edges(circuit)
    largest = max((abs(share) for *_, share in edges), default=0.0) or 1.0
    used: set[tuple[str, int]] = set()
    for first, then, span, share in reversed(edges):  # the strongest drawn last, on top
        target = graph.drawn_at(then)
        used |= {(first, span), (target, span)}
        (x0, y0), (x1, y1) = at[first, span], at[target, span]
        strength = np.sign(share) * (abs(share) / largest) ** 0.5  # the faint ones still seen
        colour = tuple(channel / 255 for channel in diverging(float(strength), 1.0))
        axes.plot([x0, x1], [y0, y1], color=colour, lw=0.3 + 2.7 * abs(strength), zorder=2)
    for node, (x, y) in at.items():
        kept = node in used
        axes.scatter([x], [y], s=18 if kept else 3, c="#333333" if kept else "#cccccc", zorder=3)
    spans = circuit.scored.spans
    axes.set_xticks([k + _HEADS_WIDTH / 2 for k in range(len(spans))], spans, fontsize=small)
    axes.set_xlabel("span", fontsize=small)
    rows = [2 * layer + 1 for layer in range(graph.layers)]
    axes.set_yticks(rows, [f"layer {layer}" for layer in range(graph.layers)], fontsize=small)
    axes.set_xlim(-0.3, len(spans))
    axes.set_ylim(-0.6, 2 * graph.layers + 1.6)
