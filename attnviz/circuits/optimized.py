"""Circuits optimised for faithfulness (``--method optimize``): a mask over the edges,
learned by gradient descent over the pairs, each edge's downstream input taking
mask × the edge's value in the run + (1 − mask) × its corrupted value — edge pruning's
formulation (Bhaskar et al. 2024, "Finding Transformer Circuits with Edge Pruning"),
with a deterministic sigmoid mask and a penalty on its mean in place of their hard-concrete
L0 and target sparsity. The loss is the circuit's metric's distance from the clean run's,
as a share of the clean run's distance from the corrupted one, squared, plus
``sparsity`` × the mask's mean. The mask starts from EAP-IG's order (its warm start, as
the 2025 MIB shared task's entries started): the circuit asked for at about one half,
the edges above it more, those below less. An edge the learned mask keeps (above one
half) scores its mask; every other scores below one half in EAP-IG's order
(:func:`ranked_scores`): the selections and ``--curve`` read the learned circuit first.

A training of a given size (``--train-each``'s, one a size of the curve) holds the size
exactly instead, as edge pruning's target sparsity does: each step's pass keeps the
edges of the largest logits, that many, whole (mask 1, the others 0: the very circuit
that size measures), the gradient reaching every logit through the sigmoid as though the
mask were soft (the straight-through estimator, Bengio et al. 2013), Adam's rate falling
to 0 along a cosine over the steps, and no sparsity term: the step's loss is the
measured circuit's own, where a soft mask read above one half is not the circuit it
trained (docs/effects.md has what each measured).

Shape letters: U upstream nodes, N downstream nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from attnviz.circuits.cost import Cost
from attnviz.circuits.faithfulness import masked_metric
from attnviz.circuits.training import Training
from attnviz.errors import option
from attnviz.pretrained.backward_pass import weights_without_gradients
from attnviz.pretrained.effects import last_logits
from attnviz.progress import advance, note

if TYPE_CHECKING:
    import torch

    from attnviz.circuits.faithfulness import Twins
    from attnviz.circuits.graph import Graph

# How far the starting mask's logits spread: the top edge starts at sigmoid(SPREAD), the
# circuit asked for at one half, twice its size at sigmoid(−SPREAD), and no lower than
# sigmoid(−FLOOR) (an edge EAP-IG scored 0 still has a gradient to rise by).
SPREAD = 4.0
FLOOR = 8.0
KEPT = 0.5  # a mask above it keeps its edge: the learned circuit


def starting_logits(graph: Graph, scores: np.ndarray, asked: int) -> np.ndarray:
    """(U, N) the mask's logits before training: by rank of |score| among the graph's
    edges, SPREAD × (asked − rank) / asked, at least −FLOOR (0 where there is no edge)."""
    rank = _ranks(graph, scores)
    size = max(1, asked)
    logits = np.zeros(graph.edges.shape)
    logits[graph.edges] = np.maximum(SPREAD * (size - rank) / size, -FLOOR)
    return logits


def ranked_scores(graph: Graph, learned: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each edge's score, (U, N): its learned mask where the mask keeps it (above KEPT);
    else below KEPT in the order of ``scores`` (EAP-IG's), which the training leaves
    uninformed (an edge it pushed out was pushed by the sparsity, each about as far), so
    that the circuits larger than the learned one grow as EAP-IG's do."""
    rank = _ranks(graph, scores)
    others = KEPT * (1 - (rank + 1) / (len(rank) + 1))  # (0, KEPT), the top first
    found = np.zeros(graph.edges.shape)
    mask = learned[graph.edges]
    found[graph.edges] = np.where(mask > KEPT, mask, others)
    return found


def tiered_scores(
    graph: Graph, trained: list[tuple[np.ndarray, np.ndarray]], scores: np.ndarray
) -> np.ndarray:
    """Each edge's score, (U, N), where circuits were trained one inside the next
    (``trained``: each circuit's edges, (U, N) bool, with the scores it was chosen by,
    smallest first): the first circuit's edges highest, then the edges each next one
    adds, each in the order it was chosen by, all above KEPT; every other edge below
    KEPT in the order of ``scores``, as :func:`ranked_scores` leaves it. The top edges
    at each trained size are that size's trained circuit."""
    order: list[int] = []  # flat indices of the graph's edges, best first
    taken = np.zeros(graph.edges.shape, dtype=bool)
    for circuit, chosen_by in trained:
        flat = np.flatnonzero(circuit & ~taken)
        order += [int(index) for index in flat[np.argsort(-chosen_by.flat[flat], kind="stable")]]
        taken |= circuit
    found = ranked_scores(graph, np.zeros(graph.edges.shape), scores)  # all below KEPT
    found.flat[order] = KEPT + (1 - KEPT) * (1 - np.arange(len(order)) / max(1, len(order)))
    return found


def _ranks(graph: Graph, scores: np.ndarray) -> np.ndarray:
    """Each edge's rank by |score|, 0 the largest, in the order ``graph.edges`` lists them."""
    order = np.argsort(-np.abs(scores[graph.edges]), kind="stable")
    rank = np.empty(len(order))
    rank[order] = np.arange(len(order))
    return rank


def optimized(
    twins_of: Callable[[int], Twins],
    pairs: int,
    start: np.ndarray,
    gap: float,
    training: Training,
) -> tuple[np.ndarray, Training]:
    """The learned mask (U, N), float64 in [0, 1] (0 where there is no edge), and the
    training with each step's loss: ``twins_of`` gives each of the ``pairs`` as a
    circuit's pass reads it, ``start`` the logits (:func:`starting_logits`; +inf holds an
    edge in the circuit, untrained), ``gap`` the clean metric less the corrupted one (the
    dataset's means) that the distance is a share of; ``training.sizes`` one size where
    each pass keeps exactly that many edges (the held ones among them), else none."""
    import torch

    graph = twins_of(0).wiring.graph
    # an edge starting at +inf is held in the circuit (mask 1, no gradient), out of the mean
    edges = torch.as_tensor(graph.edges & ~np.isposinf(start))
    (size,) = training.sizes or (None,)
    flat = torch.as_tensor(np.flatnonzero(graph.edges))  # the edges' places in a (U, N)
    logits = torch.tensor(start, dtype=torch.float32, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=training.learning_rate)
    order = _order(pairs, training.steps)
    # a sized training's circuit is its largest logits after the last step, each step's
    # pass a whole circuit: the rate falls to 0 along a cosine, so that the edges at the
    # size's margin stop trading places by the last pairs
    schedule = (
        None if size is None else torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, len(order))
    )
    clean: dict[int, float] = {}  # each pair's clean metric, once read
    losses: list[float] = []
    cost = Cost(
        "training the mask", 1, (f"fewer {option('--train-steps')} cost less in proportion",)
    )
    model = twins_of(0).model
    with weights_without_gradients(model), torch.enable_grad():
        for step, index in enumerate(order):
            started = time.monotonic()
            twins = twins_of(index)
            if index not in clean:
                with torch.no_grad():
                    logits_clean = last_logits(twins.model, twins.arguments)
                    clean[index] = float(twins.metric.of(logits_clean)[0])
            mask = torch.sigmoid(logits)  # (U, N)
            if size is not None:  # the circuit of that size, whole; the soft mask's gradient
                mask = _largest(logits, flat, size) + mask - mask.detach()
            metric = masked_metric(twins, mask).float().cpu()
            loss = ((metric - clean[index]) / gap) ** 2
            if size is None:
                assert training.sparsity is not None  # a soft mask's size is its penalty's
                loss = loss + training.sparsity * mask[edges].mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if schedule is not None:
                schedule.step()
            losses.append(float(loss.detach()))
            advance("training step", step + 1, len(order))
            note("training step", f"loss {np.mean(losses[-pairs:]):.4f}")
            if step == 1:  # the second: the first step's time holds the pass's warming up
                cost(time.monotonic() - started, 1, len(order) - 1)
    with torch.no_grad():
        learned = torch.sigmoid(logits.double()).numpy() * graph.edges
    return learned, training._replace(losses=tuple(losses))


def _largest(logits: torch.Tensor, flat: torch.Tensor, size: int) -> torch.Tensor:
    """(U, N) 1 at the ``size`` edges of largest logits (``flat``: the edges' places), 0
    elsewhere."""
    import torch

    kept = torch.zeros(logits.numel(), dtype=logits.dtype)
    kept[flat[torch.topk(logits.detach().flatten()[flat], size).indices]] = 1
    return kept.view_as(logits)


def _order(pairs: int, steps: int) -> list[int]:
    """The pair of each step: seeded permutations of the pairs, one after another."""
    generator = np.random.default_rng(0)
    rounds = -(-steps // pairs)
    return [int(index) for _ in range(rounds) for index in generator.permutation(pairs)][:steps]
