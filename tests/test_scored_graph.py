"""The scored graph every circuit reader goes through: its rows in the order a plain sort
gives, its circuit's edges and nodes, and arrays refused unless they span its axes."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.circuits.graph import Graph
from attnviz.circuits.scored import AXES, ScoredGraph
from attnviz.circuits.selections import selected
from tests.circuit_references import owners


def _scored(seed: int = 0) -> ScoredGraph:
    graph = Graph(2, 4, 2)
    generator = np.random.default_rng(seed)
    # rounded, so that ties in |score| occur and the graph's order must break them
    scores = np.where(graph.edges, np.round(generator.normal(size=graph.edges.shape), 1), 0.0)
    return ScoredGraph(graph, scores)


def test_rows_are_every_edge_largest_magnitude_first_ties_in_the_graphs_order():
    scored = selected(_scored(), "top", 12, prune=False)
    graph = scored.graph
    in_order = [
        (graph.upstream[u], graph.downstream[d], float(scored.scores[u, d]))
        for u, d in zip(*np.nonzero(graph.edges), strict=True)  # row-major: the graph's order
    ]
    expected = sorted(in_order, key=lambda edge: -abs(edge[2]))  # a stable sort
    assert len({abs(score) for *_, score in in_order}) < len(in_order)  # ties to break
    rows = list(scored.rows())
    assert [(row.upstream, row.downstream, row.score) for row in rows] == expected
    assert [row.in_circuit for row in rows] == [True] * 12 + [False] * (len(rows) - 12)
    assert [(row.upstream, row.downstream) for row in scored.rows(held=True)] == [
        (first, then) for first, then, _ in expected[:12]
    ]
    assert [row[:3] for row in scored.rows(ranked=False)] == in_order
    assert all(row.exact is None for row in rows)


def test_its_nodes_are_those_an_edge_of_its_circuit_leaves_and_one_enters():
    scored = selected(_scored(1), "top", 15, prune=False)
    kept = [(row.upstream, row.downstream) for row in scored.rows(held=True)]
    owner = owners(2, 4, 2)  # each downstream input -> the upstream nodes it belongs to
    entered = {node for _, then in kept for node in owner.get(then, ())}
    expected = {first for first, _ in kept if first == "input" or first in entered}
    assert kept and set(scored.nodes()) == expected


def test_magnitude_is_never_chosen_off_the_edges():
    scored = _scored()
    magnitude = scored.magnitude()
    assert np.isneginf(magnitude[~scored.graph.edges]).all()
    assert (magnitude[scored.graph.edges] == np.abs(scored.scores[scored.graph.edges])).all()


def test_an_array_that_does_not_span_its_axes_is_refused_naming_them():
    graph = Graph(2, 4, 2)
    upstream, downstream = graph.edges.shape
    assert AXES == ("upstream", "downstream")
    with pytest.raises(ValueError, match=f"upstream {upstream} × downstream {downstream}"):
        ScoredGraph(graph, np.zeros((upstream, downstream + 1)))
    with pytest.raises(ValueError, match="in_graph is"):
        ScoredGraph(graph, np.zeros(graph.edges.shape), np.zeros((1, downstream), dtype=bool))
