"""A circuit's faithfulness pass (:mod:`attnviz.pretrained.edges`' graph and records): the
clean run with every edge outside the circuit carrying the corrupted value.

Shape letters: T tokens, S the positions from the first where the twins differ on, U
upstream nodes, N downstream nodes, n the nodes of one group, D the model's width.
"""

from __future__ import annotations

import collections
import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.pretrained.edges import (
    Added,
    Runs,
    changed_inputs,
    given_back_each_layer,
    groups,
    users_written,
)
from attnviz.pretrained.effects import last_logits
from attnviz.progress import advance

if TYPE_CHECKING:
    import torch

    from attnviz.analysis.graph import Graph


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


def circuit_metrics(runs: Runs, kept: np.ndarray) -> list[float]:
    """The metric of the clean run with every edge outside each circuit carrying the
    corrupted value: ``kept`` (C, U, N) bool, whether each edge is in each circuit (the
    runs read with at least :func:`users_of` them). A pass of one row per circuit, as the
    clean run was: every edge kept changes nothing, and gives the clean metric itself."""
    import torch

    found: list[float] = []
    for done, circuit in enumerate(kept):
        with torch.inference_mode():
            found.append(_circuit_pass(runs, circuit))
        advance("circuit", done + 1, len(kept))
    return found


def _circuit_pass(runs: Runs, kept: np.ndarray) -> float:
    """The metric with every edge outside ``kept`` (U, N) carrying the corrupted value.
    Each downstream input gets what every edge into it would carry, the corrupted
    residual less the current one (their difference is the sum of every upstream node's,
    biases cancelling), less what the kept edges carry back: out_u(corrupt) − out_u(now)
    of each kept u. A group whose every edge is kept is left as the pass computes it."""
    import torch

    wiring, graph = runs.wiring, runs.wiring.graph
    corrupt, corrupt_read = runs.corrupt_written, runs.corrupt_read
    assert corrupt is not None and corrupt_read is not None  # a measuring record
    inside = graph.edges & kept
    written: dict[int, torch.Tensor] = {}  # each user's output in this pass, (1, S, D)
    carried: dict[int, torch.Tensor] = {}  # out_u(corrupt) − out_u(now), once u is read
    readers: collections.Counter[int] = collections.Counter()  # groups a node is carried to
    positions = len(corrupt_read[0][0])
    with contextlib.ExitStack() as hooks:
        hooks.enter_context(given_back_each_layer(runs.model, wiring.body, positions))
        hooks.enter_context(users_written(wiring.body, graph, set(corrupt), written, runs.start))

        def carried_by(upstream: int) -> torch.Tensor:
            """What ``upstream`` carries back, (S, D); held until its last group has it."""
            if upstream not in carried:
                carried[upstream] = (corrupt[upstream] - written.pop(upstream))[0]
            readers[upstream] -= 1
            if readers[upstream]:
                return carried[upstream]
            return carried.pop(upstream)  # carried to its last group: held no longer

        def corrupted(point: int, first: int, size: int) -> Added:
            keep = inside[:, first : first + size]  # (U, n)
            if (keep == graph.edges[:, first : first + size]).all():
                return lambda _residual: None
            carriers = [int(upstream) for upstream in np.nonzero(keep.any(1))[0]]
            readers.update(carriers)
            read = corrupt_read[point]  # (1, S, D)
            weights = torch.as_tensor(keep[carriers], dtype=read.dtype, device=read.device)
            # carriers a matrix product at a time: at most _ELEMENTS_AT_ONCE of (k, S, D)
            step = max(1, _ELEMENTS_AT_ONCE // max(1, read[0].numel()))

            def add(residual: torch.Tensor) -> tuple[Any, torch.Tensor]:
                away = (read - residual).unsqueeze(2)  # (1, S, 1, D)
                if not carriers:  # every node of the group reads the corrupted residual
                    return slice(None), away
                delta = away.repeat(1, 1, size, 1)  # (1, S, n, D)
                for at in range(0, len(carriers), step):
                    part = carriers[at : at + step]
                    stacked = torch.stack([carried_by(upstream) for upstream in part])  # (k, S, D)
                    delta[0] -= torch.einsum("ksd,kn->snd", stacked, weights[at : at + step])
                return slice(None), delta

            return add

        for layer, letter, first, size in groups(graph):
            point = 2 * layer + (letter == "m")  # the logits' is 2L
            adding = corrupted(point, first, size)
            hooks.enter_context(changed_inputs(wiring, layer, letter, adding, runs.start))
        logits = last_logits(runs.model, runs.arguments)
    return float(runs.metric.of(logits)[0])


_ELEMENTS_AT_ONCE = 2**22  # of the nodes a group's kept edges carry back, stacked
