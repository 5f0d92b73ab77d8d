"""A circuit: every edge of a model's graph scored on an answer (one text and its corrupted
twin, or the mean over a dataset of pairs), the circuit chosen from them
(:mod:`attnviz.circuits.selections`) and how
faithful it is: (m(circuit) − m(corrupt)) / (m(clean) − m(corrupt)), where m(circuit) is
the clean run with every edge outside the circuit carrying the corrupted run's value (over
a dataset, each m the mean over the pairs)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from attnviz.analysis.effects import Answer, Drawn
from attnviz.choices import Ablation, CircuitMethod, Level, Output, Select
from attnviz.circuits.graph import Graph
from attnviz.circuits.mib import Areas, areas_of
from attnviz.circuits.scored import ScoredGraph
from attnviz.circuits.training import Training
from attnviz.drawing import drawer

if TYPE_CHECKING:
    from attnviz.drawing import Picture


# A difference of two metrics within this share of their size is float32 rounding (the
# model's arithmetic: 2^-17, 64 units in the last place of a float32), no change.
ROUNDING = 2.0**-17


def changes_nothing(clean: float, corrupt: float) -> bool:
    """Whether the corruption leaves the metric as it was: the two differ by no more than
    float32 rounding of their size (:data:`ROUNDING`)."""
    return abs(clean - corrupt) <= ROUNDING * max(abs(clean), abs(corrupt))


def faithfulness_of(circuit: float, clean: float, corrupt: float) -> float | None:
    """(m(circuit) − m(corrupt)) / (m(clean) − m(corrupt)); None where the corruption
    changes nothing beyond rounding (:func:`changes_nothing`: a fraction of rounding is
    no measure)."""
    if changes_nothing(clean, corrupt):
        return None
    taken = clean - corrupt
    return (circuit - corrupt) / taken + 0.0  # + 0.0: no -0.0 where the circuit is corrupt


class Pair(NamedTuple):
    """One pair a circuit was scored on: the text, its answer (and versus answer) and its
    corrupted twin (None where the intervention reads none)."""

    text: str
    answer: str
    versus: str | None
    corrupt: str | None


class CurvePoint(NamedTuple):
    """A circuit of the curve: the size asked, the edges it kept, its faithfulness, the
    fraction of the graph's edges (or nodes) it was asked as (MIB's, for its curve), and
    the selection it was chosen by (the circuit's own; or, on MIB's curve, ``signed``
    too, whose circuits MIB reads its CPR from)."""

    asked: int
    kept: int
    faithfulness: float | None
    fraction: float
    select: Select


@dataclass(frozen=True)
class Circuit(Drawn):
    """Every edge's score (``scores``, (upstream, downstream); 0 where there is no edge),
    by ``method``, the mean over ``pairs`` texts and their corrupted twins; the circuit,
    ``in_graph`` (the edges it holds), chosen by ``select`` from the scores with ``asked``
    (a size, or a threshold), its dead ends pruned if ``prune``, and its
    ``faithfulness``; the ``curve`` of the circuits of other sizes. ``answer`` says what
    the metric measures (the first pair's words; its metrics are the means over the
    pairs)."""

    model: str
    scored: ScoredGraph  # every edge's score and the circuit's edges
    method: CircuitMethod
    steps: int | None
    pairs: int
    answer: Answer
    select: Select
    asked: float
    prune: bool
    faithfulness: float | None
    curve: tuple[CurvePoint, ...] = ()
    # each upstream node's output at the last position through the unembedding: its tokens
    # promoted most, where read (the picture labels heads with them)
    promoted: tuple[str, ...] = ()
    width: int | None = None  # the model's, d_model (another tool's graph file names it)
    level: Level = Level.EDGE  # what was chosen: edges, or nodes (their edges between them)
    # (U,) each upstream node's score, where the circuit was chosen by its nodes
    node_scores: np.ndarray | None = None
    source: str | None = None  # the file its scores were read from (not scored here)
    bootstrap: int | None = None  # B: its scores bootstrapped over B resamples of the pairs
    training: Training | None = None  # how its scores were learned (--method optimize)
    ablation: Ablation = Ablation.PATCH  # what an edge outside it carries
    # the pairs it was scored on (none in a file written before its pairs were kept)
    inputs: tuple[Pair, ...] = ()

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        faithful = "" if self.faithfulness is None else f", faithfulness {self.faithfulness:z.3f}"
        return (
            f"<Circuit of {self.model}: {self.scored.counted:,} edges by {self.method.value}, "
            f"{self.pairs} pair{'s' if self.pairs != 1 else ''}; {self.kept} kept{faithful}>"
        )

    @property
    def graph(self) -> Graph:
        """The graph its edges are of (:mod:`attnviz.circuits.graph`)."""
        return self.scored.graph

    @property
    def scores(self) -> np.ndarray:
        """Every edge's score, (upstream, downstream); 0 where there is no edge."""
        return self.scored.scores

    @property
    def in_graph(self) -> np.ndarray:
        """The circuit's edges, (upstream, downstream) bool."""
        return self.scored.circuit

    @property
    def kept(self) -> int:
        """How many edges the circuit holds."""
        return self.scored.kept

    @property
    def areas(self) -> Areas | None:
        """MIB's CPR and CMD, where the curve is its ten fractions (``curve=["mib"]``): CPR
        from the signed circuits' points where it has them, CMD from the circuit's own
        selection's (:func:`attnviz.circuits.mib.areas_of`)."""
        points = [(point.fraction, point.faithfulness, point.select) for point in self.curve]
        return areas_of(points, self.select)

    @property
    def clean_metric(self) -> float:
        assert self.answer.clean_metric is not None  # a circuit measures both runs
        return self.answer.clean_metric

    @property
    def corrupt_metric(self) -> float:
        assert self.answer.corrupt_metric is not None
        return self.answer.corrupt_metric

    def edges(self, count: int | None = None) -> list[tuple[str, str, float]]:
        """The ``count`` edges of largest |score| (every edge for None): (from, to, score)."""
        rows = islice(self.scored.rows(), count)
        return [(row.upstream, row.downstream, row.score) for row in rows]

    def _repr_html_(self) -> str:
        """In a notebook: the one-line header, then the circuit's own page (its graph, an
        edge's score on hover), offline and self-contained."""
        return drawer().circuit_page(self)

    @classmethod
    def load(cls, path: str | Path) -> Circuit:
        """A circuit written by ``circuit -f json`` (or :meth:`document`), read back
        (:mod:`attnviz.circuits.files`)."""
        return drawer().read_circuit(path)

    def kept_edges(self) -> list[tuple[str, str, float]]:
        """The circuit's edges, largest |score| first: (from, to, score)."""
        return [(row.upstream, row.downstream, row.score) for row in self.scored.rows(held=True)]

    def picture(self, format: Output | str = "png", **style: Any) -> Picture:
        """The circuit as a graph (layers bottom to top; edge width by |score|, colour by
        sign) beside its faithfulness curve: what ``circuit --picture`` draws."""
        return drawer().circuit_figure(self, format, style)

    def records(self) -> list[dict[str, object]]:
        """A row per edge, largest |score| first, for a table of data (csv): a column per
        span (``span:NAME``) where the scores are split by span."""
        rows = []
        for rank, edge in enumerate(self._edge_fields(), 1):
            shares = edge.pop("by_span", {})
            assert isinstance(shares, dict)  # _edge_fields' own
            rows.append({"rank": rank, **edge, **{f"span:{k}": v for k, v in shares.items()}})
        return rows

    def _edge_fields(self) -> Iterator[dict[str, object]]:
        """Each edge's fields as its files write them, largest |score| first."""
        spans = self.scored.spans
        for row in self.scored.rows():
            edge: dict[str, object] = {"from": row.upstream, "to": row.downstream}
            edge |= {"score": row.score, "in_circuit": row.in_circuit}
            if row.exact is not None:
                edge["exact"] = row.exact
            if row.by_span is not None:
                edge["by_span"] = dict(zip(spans, row.by_span, strict=True))
            if row.kept_at is not None:  # a circuit by span: the spans it keeps the edge at
                edge["kept_at"] = [
                    span for span, kept in zip(spans, row.kept_at, strict=True) if kept
                ]
            yield edge

    def document(self) -> dict[str, object]:
        """The whole circuit as one JSON document."""
        nodes = list(dict.fromkeys([*self.graph.upstream, *self.graph.downstream]))
        kept = [[first, then] for first, then, _ in self.kept_edges()]
        edges = list(self._edge_fields())
        on, areas = self.answer, self.areas
        return {
            "kind": CIRCUIT_KIND,
            "model": self.model,
            "graph": {
                "layers": self.graph.layers,
                "heads": self.graph.heads,
                "kv_heads": self.graph.kv_heads,
                "width": self.width,
            },
            "method": self.method.value,
            "ablation": self.ablation.value,
            **({} if self.source is None else {"source": self.source}),
            **({} if self.steps is None else {"steps": self.steps}),
            "pairs": self.pairs,
            "inputs": [pair._asdict() for pair in self.inputs],
            "bootstrap": self.bootstrap,
            "training": None if self.training is None else self.training._asdict(),
            "metric": self.answer.metric_name,
            "answer": {name: getattr(on, name) for name in _ANSWER_FIELDS},
            "clean_metric": self.clean_metric,
            "corrupt_metric": self.corrupt_metric,
            "promoted": list(self.promoted),
            "nodes": nodes,
            "spans": list(self.scored.spans) or None,  # each edge's "by_span" names them
            "edges": edges,
            "node_scores": None if self.node_scores is None else self.node_scores.tolist(),
            "circuit": {
                "level": self.level.value,
                "select": self.select.value,
                "count": self.scored.count.value,
                "asked": self.asked,
                "prune": self.prune,
                "kept": self.kept,
                "nodes": self.scored.nodes(),
                "edges": kept,
                "faithfulness": self.faithfulness,
            },
            "curve": [point._asdict() | {"select": point.select.value} for point in self.curve],
            **dict.fromkeys(Areas._fields) | ({} if areas is None else _areas_written(areas)),
        }


def _areas_written(areas: Areas) -> dict[str, object]:
    """MIB's areas as a document writes them, each with the selection it was read from."""
    return areas._asdict() | {
        "cpr_select": areas.cpr_select.value,
        "cmd_select": areas.cmd_select.value,
    }


CIRCUIT_KIND = "circuit"  # what a circuit's document says it is
# What a circuit's document keeps of its answer (the rest is a head's effects').
_ANSWER_FIELDS = ("answer", "answer_token", "log_prob", "versus", "versus_token", "corrupt")


def scored_elsewhere(
    circuit: Circuit, pairs: list[Pair], metric: str, ablation: Ablation
) -> str | None:
    """Why ``circuit`` (read from a file) was not scored as a command asks, on ``pairs``
    by ``metric`` and ``ablation``: what differs, first found; None where nothing does (a
    file that keeps no pairs is held to its first pair's words and its count)."""
    if circuit.ablation != ablation:
        return f"was scored with --ablation {circuit.ablation}, not {ablation}"
    if circuit.answer.metric_name != metric:
        return f"was scored by --metric {circuit.answer.metric_name}, not {metric}"
    if circuit.pairs != len(pairs):
        plural = "s" if circuit.pairs != 1 else ""
        return f"was scored on {circuit.pairs} pair{plural}, not {len(pairs)}"
    answer = circuit.answer
    kept = circuit.inputs or (Pair(pairs[0].text, answer.answer, answer.versus, answer.corrupt),)
    for index, (theirs, ours) in enumerate(zip(kept, pairs, strict=False)):
        for name in Pair._fields:
            if getattr(theirs, name) != getattr(ours, name):
                where = "" if len(pairs) == 1 else f"pair {index + 1}'s "
                return f"was scored on other pairs: {where}{name} differs"
    return None
