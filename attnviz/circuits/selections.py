"""Which edges of a scored graph make a circuit: one function, :func:`selected`, sets the
circuit of a :class:`~attnviz.circuits.scored.ScoredGraph` from its scores and what was
asked, which every pass, file and picture reads.

The rules are EAP-IG's (hannamw/EAP-IG, ``Graph.apply_topn``, ``apply_greedy``,
``apply_threshold`` and ``prune``), on attnviz's graph, whose key and value inputs are a
key/value head's, shared by the query heads of its group:

- ``top``: the N edges of largest |score| (ties in the graph's order).
- ``greedy``: from the logits up: at each step the edge of largest |score| among those
  into the logits or into an input of a node already in the circuit, its upstream node
  then joining the circuit (a key/value input is an input of every head of its group).
- ``threshold``: every edge of |score| at least T.
- ``signed``: the N edges of largest score in MIB's sign, −score here (those whose
  corrupted value lowers the metric most first): the circuits MIB's CPR is read from
  (``apply_topn(absolute=False)`` on scores of the logit difference as a loss).
- ``ilp``: exactly N edges of largest summed |score| among the circuits without a dead
  end, an integer linear program (:mod:`attnviz.circuits.ilp`); pruning leaves it whole.
- at the node level, ``top`` and ``threshold`` choose nodes (heads, MLPs, the input) by
  their own scores, and the circuit is every edge between chosen nodes (and into the
  logits), as EAP-IG's ``apply_topn(level="node")`` keeps them once pruned.
- counted ``ungrouped`` (MIB's count: a key/value input once per query head), ``top``,
  ``signed`` and ``threshold`` rank each copy by an equal share of its edge's score, and
  an edge is kept where any of its copies is among the top N.
- by span (scores split by :mod:`attnviz.circuits.spans`), ``top``, ``signed`` and
  ``threshold`` choose (edge, span) pairs by each span's share of the score (counted
  ``ungrouped``, a pair per copy), ties in the graph's order, span by span; pruning
  takes out dead ends span by span (:func:`pruned_by_span`: a head reads its keys and
  values at every position, its query and an MLP its input at its own).
- ``prune`` (after any of them): over and over, a node (a head, an MLP) stays only where
  an edge of the circuit leaves it and one enters one of its inputs (the input node needs
  none), and an edge only where both its ends stay (the logits always do), until nothing
  changes: dead ends, which carry nothing from the input to the logits, go.

Shape letters: K spans, U upstream nodes, N downstream nodes.
"""

from __future__ import annotations

import heapq

import numpy as np

from attnviz.choices import Select
from attnviz.circuits.graph import READS, Graph
from attnviz.circuits.ilp import ilp_circuit
from attnviz.circuits.scored import ScoredGraph, nodes_of


def selected(
    scored: ScoredGraph,
    select: Select,
    asked: float,
    prune: bool = True,
    node_scores: np.ndarray | None = None,
) -> ScoredGraph:
    """The scored graph with its circuit chosen from its scores by ``select``, ``asked``
    its size (top, greedy, signed, ilp) or its threshold, dead ends pruned if ``prune``. With
    ``node_scores`` (U,), a node circuit: its nodes chosen so from them, its edges those
    between them (and into the logits)."""
    select, graph = Select(select), scored.graph
    if scored.by_span is not None:
        return scored.chosen(_by_span(scored, select, asked, prune))
    if node_scores is not None:
        mask = _between(graph, _nodes_chosen(node_scores, select, asked))
    elif select is Select.THRESHOLD:
        mask = graph.edges & (scored.magnitude() >= asked)
    elif select is Select.GREEDY:
        mask = _greedy(graph, scored.magnitude(), int(asked))
    elif select is Select.SIGNED:
        mask = _top(graph, -scored.per_copy(), int(asked), scored.copies)
    elif select is Select.ILP:
        mask = ilp_circuit(graph, scored.magnitude(), int(asked))
    else:
        mask = _top(graph, scored.magnitude(), int(asked), scored.copies)
    return scored.chosen(pruned(graph, mask) if prune else mask)


def _by_span(scored: ScoredGraph, select: Select, asked: float, prune: bool) -> np.ndarray:
    """(K, U, N) bool: the (edge, span) pairs of largest |share| (of largest share in MIB's
    sign, for ``signed``), or of |share| at least the threshold, each pair counted as its
    edge's copies (an equal part of the share each: ``ungrouped``); dead ends pruned span
    by span."""
    assert scored.by_span is not None  # the caller's
    graph, copies = scored.graph, np.maximum(scored.copies, 1)
    shares = scored.by_span / copies  # (K, U, N) each copy's part
    if select is Select.THRESHOLD:
        mask = graph.edges & (np.abs(shares) >= asked)
    else:
        ranked = -shares if select is Select.SIGNED else np.abs(shares)
        spans = len(shares)
        upstream, downstream = graph.edge_list()
        values = ranked[:, upstream, downstream].T.reshape(-1)  # edge by edge, span by span
        order = np.argsort(-values, kind="stable")
        weight = np.repeat(copies[upstream, downstream], spans)[order]
        order = order[np.cumsum(weight) - weight < int(asked)]  # the copies before each, fewer
        mask = np.zeros(shares.shape, dtype=bool)
        mask[order % spans, upstream[order // spans], downstream[order // spans]] = True
    return pruned_by_span(graph, mask) if prune else mask


def _nodes_chosen(node_scores: np.ndarray, select: Select, asked: float) -> np.ndarray:
    """(U,) bool: the nodes of largest |score| (of largest score in MIB's sign, for
    ``signed``; ties in the graph's order), or those of |score| at least the threshold."""
    magnitude = np.abs(node_scores)
    if select is Select.THRESHOLD:
        return magnitude >= asked
    ranked = -node_scores if select is Select.SIGNED else magnitude
    chosen = np.zeros(len(node_scores), dtype=bool)
    chosen[np.argsort(-ranked, kind="stable")[: int(asked)]] = True
    return chosen


def _between(graph: Graph, nodes: np.ndarray) -> np.ndarray:
    """(U, N) bool: every edge from a node of ``nodes`` (U,) into an input of one of them,
    or into the logits."""
    reading = np.any(graph.inputs & nodes[:, None], axis=0)
    reading[-1] = True  # the logits
    return graph.edges & nodes[:, None] & reading[None, :]


def _top(graph: Graph, ranked: np.ndarray, count: int, copies: np.ndarray) -> np.ndarray:
    """The ``count`` edges of largest ``ranked`` (U, N) value, ties in the graph's order,
    each edge counted as its ``copies`` (U, N): an edge any of whose copies is among the
    top ``count`` is kept (its copies are ranked together, each of the same value)."""
    upstream, downstream = graph.edge_list()
    order = np.argsort(-ranked[upstream, downstream], kind="stable")
    weight = copies[upstream[order], downstream[order]]
    order = order[np.cumsum(weight) - weight < count]  # the copies before each, fewer
    mask = np.zeros(graph.edges.shape, dtype=bool)
    mask[upstream[order], downstream[order]] = True
    return mask


def _greedy(graph: Graph, magnitude: np.ndarray, count: int) -> np.ndarray:
    """EAP-IG's greedy selection: a heap of the edges into what the circuit holds, the
    largest |score| taken first (ties: the graph's order)."""
    mask = np.zeros(graph.edges.shape, dtype=bool)
    offered = np.zeros(len(graph.downstream), dtype=bool)  # (N) whose edges are in the heap
    joined = np.zeros(len(graph.upstream), dtype=bool)  # (U)
    heap: list[tuple[float, int, int]] = []

    def offer(downstream: np.ndarray) -> None:
        for d in downstream[~offered[downstream]]:
            offered[d] = True
            for u in np.nonzero(graph.edges[:, d])[0]:
                heapq.heappush(heap, (-magnitude[u, d], int(u), int(d)))

    offer(np.array([len(graph.downstream) - 1]))  # the logits
    while count > 0 and heap:
        _, u, d = heapq.heappop(heap)
        mask[u, d] = True
        count -= 1
        if not joined[u]:
            joined[u] = True
            offer(np.nonzero(graph.inputs[u])[0])
    return mask


def pruned(graph: Graph, mask: np.ndarray) -> np.ndarray:
    """``mask`` without its dead ends: EAP-IG's ``prune``, repeated until nothing changes."""
    mask = mask.copy()
    while True:
        nodes = nodes_of(graph, mask)
        reading = (graph.inputs & nodes[:, None]).any(axis=0)  # (N) an input of a node kept
        reading[-1] = True  # the logits
        kept = mask & nodes[:, None] & reading[None, :]
        if (kept == mask).all():
            return kept
        mask = kept


def pruned_by_span(graph: Graph, mask: np.ndarray) -> np.ndarray:
    """(K, U, N) ``mask`` without its dead ends span by span, repeated until nothing
    changes: a node at a span stays only where an edge of the circuit leaves it there and
    one enters one of its inputs, its query or its MLP's input at that span, its keys or
    values at any span (a head reads them at every position; the input node needs none);
    an edge at a span only where its upstream node stays there and a node it is an input
    of stays at that span (a query, an MLP's input) or at any span (a key, a value; the
    logits always do). Kept at every span alike, a circuit is pruned as its edges are."""
    across = np.array([name.endswith(_READ_ACROSS) for name in graph.downstream])  # (N,)
    mask = mask.copy()
    while True:
        into = mask.any(axis=1)  # (K, N): each input entered at each span
        received = np.where(across, into.any(axis=0), into)
        entering = np.any(graph.inputs[None] & received[:, None, :], axis=2)  # (K, U)
        entering[:, 0] = True  # the input node
        nodes = np.any(mask, axis=2) & entering  # (K, U)
        read_here = np.any(graph.inputs[None] & nodes[:, :, None], axis=1)  # (K, N)
        reading = np.where(across, read_here.any(axis=0), read_here)
        reading[:, -1] = True  # the logits
        kept = mask & nodes[:, :, None] & reading[:, None, :]
        if (kept == mask).all():
            return kept
        mask = kept


_READ_ACROSS = tuple(f".{read}" for read in READS[1:])  # a key's and a value's inputs
