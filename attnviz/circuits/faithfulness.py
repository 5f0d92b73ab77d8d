"""A circuit's faithfulness pass (:mod:`attnviz.circuits.edges`' graph): the clean run
with every edge outside the circuit carrying the corrupted value, run beside the
corrupted run itself, row 0 of the same pass: each group's corrupted residual and what
each node carries back are taken from it as the pass goes, so that no record of the
corrupted run is kept (at 8,192 tokens, a gigabyte).

A circuit by span (:mod:`attnviz.circuits.spans`) keeps an edge at some spans: at the
positions of the others it carries the corrupted value, each stretch of one span's
positions taking that span's edges; one that keeps each edge at every span or none is
the edge circuit, and its pass is that circuit's.

Shape letters: T tokens, S the positions from the first where the twins differ on, K
spans, U upstream nodes, N downstream nodes, n the nodes of one group, k its carriers,
D the model's width.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.circuits.ablated import Ablated, changed_from, forced
from attnviz.circuits.edges import Added, Wiring, changed_inputs
from attnviz.circuits.graph import READS
from attnviz.circuits.node_outputs import (
    Carried,
    stacked,
    users_carried,
)
from attnviz.circuits.spans import Spans
from attnviz.memory import block_size
from attnviz.pretrained.effects import last_logits
from attnviz.pretrained.sites import given_back_each_layer
from attnviz.progress import FirstPart, advance

if TYPE_CHECKING:
    import torch

    from attnviz.circuits.graph import Graph
    from attnviz.pretrained.metrics import Metric


@dataclass(frozen=True)
class Twins:
    """A text and its corrupted twin as a circuit's pass reads them: the model's wiring
    (found by a pass over either), both texts' arguments, the metric."""

    wiring: Wiring
    model: Any
    arguments: dict
    corrupt_arguments: dict
    metric: Metric
    ablated: Ablated | None = None  # the corrupted run's nodes replaced (the clean text's)
    spans: Spans | None = None  # the text's spans, where a circuit keeps edges by span


def circuit_metrics(twins: Twins, kept: np.ndarray, told: FirstPart | None = None) -> list[float]:
    """The metric of the clean run with every edge outside each circuit carrying the
    corrupted value: ``kept`` (C, U, N) bool, whether each edge is in each circuit, or
    (C, K, U, N), at each of the twins' spans. A pass of two rows per circuit: the
    corrupted run, and the circuit's (``told`` hears how long the first took)."""
    import torch

    found: list[float] = []
    started = time.monotonic()
    for done, circuit in enumerate(kept):
        with torch.inference_mode():
            found.append(_circuit_pass(twins, circuit))
        advance("circuit", done + 1, len(kept))
        if done == 0 and told is not None:
            told(time.monotonic() - started, 1, len(kept))
    return found


def _circuit_pass(twins: Twins, kept: np.ndarray) -> float:
    """The metric with every edge outside ``kept`` (U, N), or (K, U, N) by span, carrying
    the corrupted value. A group whose every edge is kept is left as the pass computes it."""
    graph = twins.wiring.graph
    if kept.ndim == 3 and (kept == kept[:1]).all():  # alike at every span: the edge circuit
        kept = kept[0]
    inside = graph.edges & kept
    changed = _changed(graph, inside)
    spans = None if inside.ndim == 2 else twins.spans
    assert inside.ndim == 2 or spans is not None  # a circuit by span, of a text's spans
    return float(_pass(twins, changed, lambda like: _on_device(inside, changed, like), spans))


def masked_metric(twins: Twins, mask: torch.Tensor) -> torch.Tensor:
    """The metric with each edge carrying ``mask`` × its value in this run + (1 − ``mask``)
    × the corrupted run's (``mask``: (U, N) in [0, 1], float32; 1 where an edge is whole),
    differentiable in ``mask``: every group is changed, every node with an edge into it
    a carrier."""
    graph = twins.wiring.graph
    every = _grouped(graph, np.asarray(graph.edges.any(0)), graph.edges)
    edges = mask * _as_tensor(graph.edges, mask)  # no weight where there is no edge

    def weights(like: torch.Tensor) -> list[torch.Tensor]:
        on = edges.to(like.device, like.dtype)
        return [
            on[_as_tensor(group.carriers, on)][:, _as_tensor(group.nodes, on)].T for group in every
        ]

    return _pass(twins, every, weights)


def _as_tensor(found: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.as_tensor(found, device=like.device)


def _pass(
    twins: Twins,
    changed: list[_Group],
    weights_of: Callable[[torch.Tensor], list[torch.Tensor]],
    spans: Spans | None = None,
) -> torch.Tensor:
    """The circuit row's metric, (): each input of the ``changed`` groups gets what every
    edge into it would carry, the corrupted residual less the current one (their
    difference is the sum of every upstream node's, biases cancelling), less what each
    carrier carries back, out_u(corrupt) − out_u(now), weighted by ``weights_of`` (each
    group's (n, k), made like the first residual; with ``spans``, (K, n, k): a span's
    weights at its positions)."""
    import torch

    wiring, graph = twins.wiring, twins.wiring.graph
    start = changed_from(twins.arguments, twins.corrupt_arguments, twins.ablated)
    both = stacked(twins.corrupt_arguments, twins.arguments)  # rows: corrupted, circuit's
    users = {int(upstream) for group in changed for upstream in group.carriers}
    carried: dict[int, Carried] = {}  # out_u(corrupt) − out_u(now), once computed
    readers: collections.Counter[int] = collections.Counter()  # groups a node is carried to
    tokens = int(twins.arguments["input_ids"].shape[1])
    positions = tokens - start
    # each stretch of one span's positions, counted from start: (span, first, end)
    stretches = [(0, 0, positions)] if spans is None else [
        (span, first - start, end - start) for span, first, end in spans.stretches(start, tokens)
    ]  # fmt: skip
    with contextlib.ExitStack() as hooks:
        hooks.enter_context(given_back_each_layer(twins.model, wiring.body, positions))
        hooks.enter_context(forced(wiring.body, twins.ablated, _CORRUPTED_ROW))
        hooks.enter_context(users_carried(wiring.body, graph, users, carried, start))

        def carried_by(upstream: int) -> torch.Tensor:
            """What ``upstream`` carries back, (S, D); held until its last group has it."""
            readers[upstream] -= 1
            if readers[upstream]:
                return carried[upstream].widened()
            return carried.pop(upstream).widened()  # to its last group: held no longer

        weights: list[torch.Tensor] = []  # each group's, on the device once the pass starts

        def corrupted(index: int, group: _Group) -> Added:
            carriers = [int(upstream) for upstream in group.carriers]
            readers.update(carriers)

            def add(residual: torch.Tensor) -> tuple[Any, torch.Tensor]:
                away = (residual[0] - residual[1])[None, :, None]  # (1, S, 1, D)
                if not carriers:  # every node of the group reads the corrupted residual
                    return _CIRCUIT_ROW, away
                if not weights:
                    weights.extend(weights_of(away))
                # carriers a matrix product at a time: at most _ELEMENTS_AT_ONCE of (k, S, D)
                at_once = block_size(_ELEMENTS_AT_ONCE, residual.device)
                step = max(1, at_once // max(1, residual[0].numel()))
                delta = away  # (1, S, n, D) once a carrier is subtracted
                for at in range(0, len(carriers), step):
                    part = carriers[at : at + step]
                    back = torch.stack([carried_by(upstream) for upstream in part])  # (k, S, D)
                    taken = _taken(weights[index], at, step, back, stretches)  # (n, S, D)
                    # a new (1, S, n, D) the first time, broadcast
                    delta = delta - taken.transpose(0, 1)
                return _CIRCUIT_ROW, delta

            return add

        for index, group in enumerate(changed):
            adding = corrupted(index, group)
            hooks.enter_context(changed_inputs(wiring, group.layer, group.letters, adding, start))
        logits = last_logits(twins.model, both)
    return twins.metric.of(logits)[1]


def _taken(
    weights: torch.Tensor,
    at: int,
    step: int,
    back: torch.Tensor,
    stretches: list[tuple[int, int, int]],
) -> torch.Tensor:
    """What carriers ``at``… (``back``, (k, S, D)) take back into a group's n inputs, (n, S,
    D): their kept edges' weights (n, k), or each span's (K, n, k) at its stretches."""
    import torch

    if weights.ndim == 2:  # a matrix product: on small texts an einsum's planning costs more
        return (weights[:, at : at + step] @ back.flatten(1)).view(-1, *back.shape[1:])
    parts = [
        (weights[span, :, at : at + step] @ back[:, first:end].flatten(1)).view(
            weights.shape[1], end - first, back.shape[2]
        )
        for span, first, end in stretches
    ]
    return torch.cat(parts, 1)


_ELEMENTS_AT_ONCE = 2**22  # of the nodes a group's kept edges carry back, stacked
_CIRCUIT_ROW = slice(1, 2)  # the pass's row changed: a slice, so that indexing is a view
_CORRUPTED_ROW = slice(0, 1)


@dataclass(frozen=True)
class _Group:
    """Downstream nodes a circuit's pass changes together: those of a layer's query, key and
    value inputs whose edges are not all kept (one norm and one product for them all), an
    MLP's input, or the logits'. A group whose every edge is kept is left as the pass
    computes it."""

    layer: int
    letters: str  # :func:`changed_inputs`'
    nodes: np.ndarray  # (n) their downstream indices, in the letters' order
    carriers: np.ndarray  # the upstream nodes whose kept edges into them carry back


def _changed(graph: Graph, inside: np.ndarray) -> list[_Group]:
    """The groups a pass keeping the edges ``inside`` (U, N), or (K, U, N) by span,
    changes, in the pass's order (a node's carriers: its edges kept at any span)."""
    if inside.ndim == 3:
        touched = (inside != graph.edges).any((0, 1))
        return _grouped(graph, np.asarray(touched), np.asarray(inside.any(0)))
    return _grouped(graph, (inside != graph.edges).any(0), inside)


def _grouped(graph: Graph, touched: np.ndarray, carrying: np.ndarray) -> list[_Group]:
    """The groups of the ``touched`` downstream nodes (N,) in the pass's order, each
    node's carriers those of ``carrying`` (U, N): the edges kept (or every edge)."""
    found: list[tuple[int, str, list[int]]] = []
    for layer, letter, first, size, _ in graph.groups():
        if not touched[first : first + size].any():
            continue
        nodes = list(range(first, first + size))
        if letter in READS and found and found[-1][0] == layer and found[-1][1][-1] in READS:
            found[-1] = (layer, found[-1][1] + letter, found[-1][2] + nodes)
        else:
            found.append((layer, letter, nodes))
    return [
        _Group(layer, letters, np.array(nodes), np.nonzero(carrying[:, nodes].any(1))[0])
        for layer, letters, nodes in found
    ]


def _on_device(inside: np.ndarray, changed: list[_Group], like: torch.Tensor) -> list[torch.Tensor]:
    """Each group's kept edges from its carriers, (n, k) (by span, (K, n, k)) in ``like``'s
    dtype, on its device in one copy: a copy of each would wait on a GPU for every queued
    operation."""
    import torch

    rows = [
        np.swapaxes(inside[..., group.carriers, :][..., group.nodes], -1, -2) for group in changed
    ]
    flat = [np.asarray(found, dtype=np.float32).reshape(-1) for found in rows]
    copied = torch.as_tensor(np.concatenate(flat), dtype=like.dtype, device=like.device)
    parts = copied.split([found.size for found in rows])
    return [part.view(found.shape) for part, found in zip(parts, rows, strict=True)]
