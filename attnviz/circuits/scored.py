"""A scored graph: every edge of a :class:`~attnviz.circuits.graph.Graph` with its score,
and the circuit chosen from them, over axes this class names and owns.

Scoring gives one (:mod:`attnviz.circuits.phases`), the selections set its circuit
(:func:`attnviz.circuits.selections.selected`), and the circuit's faithfulness pass, its
rows, its files (json, csv, EAP-IG's) and its pictures read it through the methods here
(:meth:`ScoredGraph.ranked`, :meth:`ScoredGraph.rows`, :meth:`ScoredGraph.magnitude`), not
by the shape of a bare array. A new axis of the scores (a token position, a span) is a
change of this class and of the passes that fill it.

Shape letters: U upstream nodes, N downstream nodes (:data:`AXES`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from attnviz.choices import Count
from attnviz.circuits.graph import Graph

AXES = ("upstream", "downstream")  # what each axis of the scores and the circuit runs over


class EdgeRow(NamedTuple):
    """One edge of a scored graph: its ends' names, its score, whether the circuit holds
    it, and whether its score was computed exactly (None where no edge was refined)."""

    upstream: str
    downstream: str
    score: float
    in_circuit: bool
    exact: bool | None
    by_span: tuple[float, ...] | None = None  # its score's share in each span, where split
    kept_at: tuple[bool, ...] | None = None  # at which spans the circuit holds it, where by span


@dataclass(frozen=True, eq=False)
class ScoredGraph:
    """``scores`` (U, N) float32: each edge's, 0 where there is no edge; ``in_graph`` (U, N)
    bool: the circuit's edges (None before one is chosen; (K, U, N) where it keeps edges
    by span); ``exact`` (U, N) bool: the
    edges whose scores were computed exactly, where an estimate's top were (``refine``);
    ``count``: how its edges are counted where a circuit is sized and what it keeps told
    (``ungrouped``: a key/value input once per query head, its score divided among them,
    as MIB's graph has them); ``by_span`` (K, U, N): each span's share of the scores, where
    they are split by the ``spans`` of the pairs' positions (:mod:`attnviz.circuits.spans`;
    the shares sum to the scores)."""

    graph: Graph
    scores: np.ndarray
    in_graph: np.ndarray | None = None
    exact: np.ndarray | None = None
    count: Count = Count.GROUPED
    by_span: np.ndarray | None = None
    spans: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        shape = self.graph.edges.shape
        for name in ("scores", "in_graph", "exact"):
            value = getattr(self, name)
            if name == "in_graph" and value is not None and value.ndim == 3:
                value = value[0]  # a circuit by span: (K, U, N)
            if value is not None and value.shape != shape:
                axes = " × ".join(f"{axis} {size}" for axis, size in zip(AXES, shape, strict=True))
                raise ValueError(f"{name} is {value.shape}, not the graph's {axes}")
        if self.by_span is not None and self.by_span.shape != (len(self.spans), *shape):
            raise ValueError(
                f"by_span is {self.by_span.shape}, not {len(self.spans)} spans × {shape}"
            )

    def chosen(self, in_graph: np.ndarray) -> ScoredGraph:
        """The same scores with ``in_graph`` (U, N) bool as the circuit."""
        return replace(self, in_graph=in_graph)

    @property
    def circuit(self) -> np.ndarray:
        """The circuit's edges, (U, N) bool (one has been chosen): by span, those it keeps
        at any span."""
        assert self.in_graph is not None  # selections.selected's
        return self.in_graph if self.in_graph.ndim == 2 else np.asarray(self.in_graph.any(0))

    @property
    def measured(self) -> np.ndarray:
        """What a faithfulness pass keeps: the circuit's edges (U, N), or its (edge, span)
        pairs (K, U, N)."""
        assert self.in_graph is not None  # selections.selected's
        return self.in_graph

    @property
    def by_spans(self) -> bool:
        """Whether the circuit keeps edges by span ((edge, span) pairs)."""
        return self.in_graph is not None and self.in_graph.ndim == 3

    @property
    def kept(self) -> int:
        """How many edges the circuit holds, as they are counted ((edge, span) pairs, where
        it keeps them by span)."""
        assert self.in_graph is not None  # selections.selected's
        if self.by_spans:
            return int(((self.in_graph & self.graph.edges) * self.copies).sum())
        return int((self.circuit * self.copies).sum())

    @property
    def copies(self) -> np.ndarray:
        """(U, N) int: how many edges each edge is counted as (:meth:`Graph.copies`)."""
        return self.graph.copies(self.count)

    @property
    def counted(self) -> int:
        """How many edges the graph has, as they are counted ((edge, span) pairs, where
        the scores are split by span)."""
        return int(self.copies.sum()) * max(1, len(self.spans))

    def nodes(self) -> list[str]:
        """The heads and MLPs the circuit holds (and the input, where an edge leaves it)."""
        held = nodes_of(self.graph, self.circuit)
        return [name for name, kept in zip(self.graph.upstream, held, strict=True) if kept]

    def magnitude(self) -> np.ndarray:
        """Each edge's |score| as counted, (U, N) (an edge counted as several: each copy's
        share); -inf where there is no edge (never chosen)."""
        return np.where(self.graph.edges, np.abs(self.per_copy()), -np.inf)

    def per_copy(self) -> np.ndarray:
        """Each edge's score as counted, (U, N): an edge counted as several gives each copy
        an equal share (as ``-f eap-ig`` writes them); 0 where there is no edge."""
        return self.scores / np.maximum(self.copies, 1)

    def largest(self) -> float:
        """The largest |score| of any edge."""
        return float(np.abs(self.scores[self.graph.edges]).max())

    def scored_edges(self) -> int:
        """How many edges have a score other than 0."""
        return int((self.scores[self.graph.edges] != 0).sum())

    def ranked(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge's (upstream, downstream) indices, largest |score| first (ties in the
        graph's order)."""
        upstream, downstream = self.graph.edge_list()
        order = np.argsort(-np.abs(self.scores[upstream, downstream]), kind="stable")
        return upstream[order], downstream[order]

    def rows(self, ranked: bool = True, held: bool = False) -> Iterator[EdgeRow]:
        """Every edge (only the circuit's where ``held``) as a row, largest |score| first
        (in the graph's order unless ``ranked``)."""
        upstream, downstream = self.ranked() if ranked else self.graph.edge_list()
        kept = self.circuit[upstream, downstream]
        if held:
            upstream, downstream, kept = upstream[kept], downstream[kept], kept[kept]
        exact = None if self.exact is None else self.exact[upstream, downstream]
        shares = None if self.by_span is None else self.by_span[:, upstream, downstream].T
        at = self.measured[:, upstream, downstream].T if self.by_spans else None
        names = self.graph.upstream, self.graph.downstream
        for place, (u, d) in enumerate(zip(upstream.tolist(), downstream.tolist(), strict=True)):
            yield EdgeRow(
                names[0][u],
                names[1][d],
                float(self.scores[u, d]),
                bool(kept[place]),
                None if exact is None else bool(exact[place]),
                None if shares is None else tuple(shares[place].tolist()),
                None if at is None else tuple(at[place].tolist()),
            )


def nodes_of(graph: Graph, mask: np.ndarray) -> np.ndarray:
    """The nodes a circuit holds, (U,) bool: those an edge of it leaves and one enters (one
    of their inputs; the input node needs none)."""
    leaving = np.any(mask, axis=1)
    entering = np.any(graph.inputs & np.any(mask, axis=0)[None, :], axis=1)
    entering[0] = True  # the input node
    return leaving & entering
