"""Circuits optimised for faithfulness (``--method optimize``): a mask over the edges,
learned by gradient descent over the pairs, each edge's downstream input taking
mask × the edge's value in the run + (1 − mask) × its corrupted value — edge pruning's
formulation (Bhaskar et al. 2024, "Finding Transformer Circuits with Edge Pruning"),
with a deterministic sigmoid mask and a penalty on its mean in place of their hard-concrete
L0 and target sparsity. The loss is the circuit's metric's distance from the clean run's,
as a share of the clean run's distance from the corrupted one, squared, plus
``sparsity`` × the mask's mean. The mask starts from EAP-IG's order (its warm start, as
the 2025 MIB shared task's entries started): the circuit asked for at about one half,
the edges above it more, those below less; only the top CANDIDATES × the circuit's size
are trained, the others carrying their corrupted values. The learned mask is each edge's
score, read by the selections and by ``--curve``: the candidates first, by their mask,
then the others in EAP-IG's order.

Shape letters: U upstream nodes, N downstream nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from attnviz.analysis.circuit import Training
from attnviz.pretrained.circuit_cost import Cost
from attnviz.pretrained.effects import last_logits
from attnviz.pretrained.faithfulness import masked_metric
from attnviz.pretrained.patching import weights_without_gradients
from attnviz.progress import advance, note

if TYPE_CHECKING:
    from attnviz.analysis.graph import Graph
    from attnviz.pretrained.faithfulness import Twins

# The starting mask's logits, by EAP-IG's rank: the top edge at SPREAD, the circuit asked
# for at 0 (one half), twice its size at −SPREAD, CANDIDATES times its size at LOWEST;
# those are trained, and none falls below LOWEST. Every other edge stays in EAP-IG's order
# between TAIL[0] and TAIL[1], below every candidate: the circuits larger than the
# candidates are EAP-IG's, and a mask of e^-20 weighs nothing in the pass.
SPREAD = 4.0
CANDIDATES = 4
LOWEST = SPREAD * (1 - CANDIDATES)
TAIL = (-20.0, -30.0)


def starting_logits(graph: Graph, scores: np.ndarray, asked: int) -> np.ndarray:
    """(U, N) the mask's logits before training (0 where there is no edge): by rank of
    |score| among the graph's edges, SPREAD × (asked − rank) / asked for the candidates,
    the top CANDIDATES × asked; the rest from TAIL[0] down to TAIL[1]."""
    upstream, downstream = np.nonzero(graph.edges)
    order = np.argsort(-np.abs(scores[upstream, downstream]), kind="stable")
    rank = np.empty(len(order))
    rank[order] = np.arange(len(order))
    size = max(1, asked)
    candidates = min(len(order), CANDIDATES * size)
    below = (rank - candidates) / max(1, len(order) - candidates)  # 0 to 1 past them
    logits = np.zeros(graph.edges.shape)
    logits[upstream, downstream] = np.where(
        rank < candidates,
        SPREAD * (size - rank) / size,
        TAIL[0] + below * (TAIL[1] - TAIL[0]),
    )
    return logits


def optimized(
    twins_of: Callable[[int], Twins],
    pairs: int,
    start: np.ndarray,
    gap: float,
    training: Training,
) -> tuple[np.ndarray, Training]:
    """The learned mask (U, N), float64 in [0, 1] (0 where there is no edge), and the
    training with each step's loss: ``twins_of`` gives each of the ``pairs`` as a
    circuit's pass reads it, ``start`` the logits (:func:`starting_logits`), ``gap`` the
    clean metric less the corrupted one (the dataset's means) that the distance is a share
    of."""
    import torch

    graph = twins_of(0).wiring.graph
    trained = graph.edges & (start >= LOWEST)  # the candidates (starting_logits')
    candidates = torch.as_tensor(trained)
    logits = torch.tensor(start, dtype=torch.float32, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=training.learning_rate)
    order = _order(pairs, training.steps)
    clean: dict[int, float] = {}  # each pair's clean metric, once read
    losses: list[float] = []
    cost = Cost("training the mask", 1, "fewer --train-steps cost less in proportion")
    started = time.monotonic()
    model = twins_of(0).model
    with weights_without_gradients(model), torch.enable_grad():
        for step, index in enumerate(order):
            twins = twins_of(index)
            if index not in clean:
                with torch.no_grad():
                    logits_clean = last_logits(twins.model, twins.arguments)
                    clean[index] = float(twins.metric.of(logits_clean)[0])
            mask = torch.sigmoid(logits) * candidates  # (U, N): 0 past the candidates
            metric = masked_metric(twins, mask, trained).float().cpu()
            distance = ((metric - clean[index]) / gap) ** 2
            loss = distance + training.sparsity * mask[candidates].mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():  # a candidate stays above every other edge
                logits.copy_(torch.where(candidates, logits.clamp(min=LOWEST), logits))
            losses.append(float(loss.detach()))
            advance("training step", step + 1, len(order))
            note("training step", f"loss {np.mean(losses[-pairs:]):.4f}")
            if step == 0:
                cost(time.monotonic() - started, 1, len(order))
    with torch.no_grad():
        learned = torch.sigmoid(logits.double()).numpy() * graph.edges
    return learned, training._replace(losses=tuple(losses))


def _order(pairs: int, steps: int) -> list[int]:
    """The pair of each step: seeded permutations of the pairs, one after another."""
    generator = np.random.default_rng(0)
    rounds = -(-steps // pairs)
    return [int(index) for _ in range(rounds) for index in generator.permutation(pairs)][:steps]
