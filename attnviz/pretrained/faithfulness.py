"""A circuit's faithfulness pass (:mod:`attnviz.pretrained.edges`' graph): the clean run
with every edge outside the circuit carrying the corrupted value, run beside the
corrupted run itself, row 0 of the same pass: each group's corrupted residual and what
each node carries back are taken from it as the pass goes, so that no record of the
corrupted run is kept (at 8,192 tokens, a gigabyte).

Shape letters: T tokens, S the positions from the first where the twins differ on, U
upstream nodes, N downstream nodes, n the nodes of one group, D the model's width.
"""

from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.pretrained.edges import (
    Added,
    Wiring,
    changed_inputs,
    first_difference,
    given_back_each_layer,
    groups,
    users_written,
)
from attnviz.pretrained.effects import last_logits
from attnviz.progress import advance

if TYPE_CHECKING:
    import torch

    from attnviz.analysis.graph import Graph
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


def users_of(graph: Graph, kept: np.ndarray) -> np.ndarray:
    """The upstream nodes whose outputs the circuits ``kept`` (C, U, N) carry back: those
    with a kept edge into a group not every edge of which is kept (a group every edge of
    which is kept is left alone)."""
    needed = np.zeros(graph.edges.shape[0], dtype=bool)
    for circuit in graph.edges & kept:
        for _layer, _letter, first, size in groups(graph):
            part = circuit[:, first : first + size]
            if not (part == graph.edges[:, first : first + size]).all():
                needed |= part.any(1)
    return np.nonzero(needed)[0]


def circuit_metrics(twins: Twins, kept: np.ndarray) -> list[float]:
    """The metric of the clean run with every edge outside each circuit carrying the
    corrupted value: ``kept`` (C, U, N) bool, whether each edge is in each circuit. A
    pass of two rows per circuit: the corrupted run, and the circuit's."""
    import torch

    found: list[float] = []
    for done, circuit in enumerate(kept):
        with torch.inference_mode():
            found.append(_circuit_pass(twins, circuit))
        advance("circuit", done + 1, len(kept))
    return found


def _circuit_pass(twins: Twins, kept: np.ndarray) -> float:
    """The metric with every edge outside ``kept`` (U, N) carrying the corrupted value.
    Each downstream input gets what every edge into it would carry, the corrupted
    residual less the current one (their difference is the sum of every upstream node's,
    biases cancelling), less what the kept edges carry back: out_u(corrupt) − out_u(now)
    of each kept u. A group whose every edge is kept is left as the pass computes it."""
    import torch

    wiring, graph = twins.wiring, twins.wiring.graph
    start = first_difference(twins.arguments, twins.corrupt_arguments)
    both = {  # row 0 the corrupted run, row 1 the circuit's
        name: torch.cat([twins.corrupt_arguments[name], value])
        if isinstance(value, torch.Tensor)
        else value
        for name, value in twins.arguments.items()
    }
    inside = graph.edges & kept
    users = {int(upstream) for upstream in users_of(graph, kept[None])}
    written: dict[int, torch.Tensor] = {}  # each user's outputs in both rows, (2, S, D)
    carried: dict[int, torch.Tensor] = {}  # out_u(corrupt) − out_u(now), once u is read
    readers: collections.Counter[int] = collections.Counter()  # groups a node is carried to
    positions = int(twins.arguments["input_ids"].shape[1]) - start
    with contextlib.ExitStack() as hooks:
        hooks.enter_context(given_back_each_layer(twins.model, wiring.body, positions))
        hooks.enter_context(users_written(wiring.body, graph, users, written, start))

        def carried_by(upstream: int) -> torch.Tensor:
            """What ``upstream`` carries back, (S, D); held until its last group has it."""
            if upstream not in carried:
                outputs = written.pop(upstream)
                carried[upstream] = outputs[0] - outputs[1]
            readers[upstream] -= 1
            if readers[upstream]:
                return carried[upstream]
            return carried.pop(upstream)  # carried to its last group: held no longer

        def corrupted(first: int, size: int) -> Added:
            keep = inside[:, first : first + size]  # (U, n)
            if (keep == graph.edges[:, first : first + size]).all():
                return lambda _residual: None
            carriers = [int(upstream) for upstream in np.nonzero(keep.any(1))[0]]
            readers.update(carriers)

            def add(residual: torch.Tensor) -> tuple[Any, torch.Tensor]:
                away = (residual[0] - residual[1])[None, :, None]  # (1, S, 1, D)
                if not carriers:  # every node of the group reads the corrupted residual
                    return [1], away
                weights = torch.as_tensor(keep[carriers], dtype=away.dtype, device=away.device)
                # carriers a matrix product at a time: at most _ELEMENTS_AT_ONCE of (k, S, D)
                step = max(1, _ELEMENTS_AT_ONCE // max(1, residual[0].numel()))
                delta = away.repeat(1, 1, size, 1)  # (1, S, n, D)
                for at in range(0, len(carriers), step):
                    part = carriers[at : at + step]
                    stacked = torch.stack([carried_by(upstream) for upstream in part])  # (k, S, D)
                    delta[0] -= torch.einsum("ksd,kn->snd", stacked, weights[at : at + step])
                return [1], delta

            return add

        for layer, letter, first, size in groups(graph):
            adding = corrupted(first, size)
            hooks.enter_context(changed_inputs(wiring, layer, letter, adding, start))
        logits = last_logits(twins.model, both)
    return float(twins.metric.of(logits)[1])


_ELEMENTS_AT_ONCE = 2**22  # of the nodes a group's kept edges carry back, stacked
