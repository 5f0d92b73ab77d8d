"""A circuit: every edge of a model's graph scored on an answer (one text and its corrupted
twin, or the mean over a dataset of pairs), the circuit chosen from them
(:mod:`attnviz.analysis.selections`) and how
faithful it is: (m(circuit) − m(corrupt)) / (m(clean) − m(corrupt)), where m(circuit) is
the clean run with every edge outside the circuit carrying the corrupted run's value (over
a dataset, each m the mean over the pairs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from attnviz.analysis.effects import Answer, Drawn
from attnviz.analysis.graph import Graph
from attnviz.analysis.mib import Areas, areas_of
from attnviz.analysis.selections import nodes_of
from attnviz.analysis.training import Training
from attnviz.choices import CircuitMethod, Intervention, Level, Output, Select
from attnviz.drawing import drawer
from attnviz.errors import UsageError

if TYPE_CHECKING:
    from attnviz.drawing import Picture


def ranked(graph: Graph, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every edge's (upstream, downstream) indices, largest |score| first (ties in the
    graph's order)."""
    upstream, downstream = graph.edge_list()
    order = np.argsort(-np.abs(scores[upstream, downstream]), kind="stable")
    return upstream[order], downstream[order]


def faithfulness_of(circuit: float, clean: float, corrupt: float) -> float | None:
    """(m(circuit) − m(corrupt)) / (m(clean) − m(corrupt)); None where the corruption
    changes nothing (no fraction of 0 is defined)."""
    taken = clean - corrupt
    if taken == 0:
        return None
    return (circuit - corrupt) / taken + 0.0  # + 0.0: no -0.0 where the circuit is corrupt


class CurvePoint(NamedTuple):
    """A circuit of the curve: the size asked, the edges it kept, its faithfulness, and
    the fraction of the graph's edges (or nodes) it was asked as (MIB's, for its curve)."""

    asked: int
    kept: int
    faithfulness: float | None
    fraction: float


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
    graph: Graph
    scores: np.ndarray
    method: CircuitMethod
    steps: int | None
    pairs: int
    answer: Answer
    select: Select
    asked: float
    prune: bool
    in_graph: np.ndarray  # (U, N) bool
    faithfulness: float | None
    curve: tuple[CurvePoint, ...] = ()
    # where --refine computed an estimate's top edges exactly: (upstream, downstream) bool
    exact: np.ndarray | None = None
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
    ablation: Intervention = Intervention.PATCH  # what an edge outside it carries

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        faithful = "" if self.faithfulness is None else f", faithfulness {self.faithfulness:z.3f}"
        return (
            f"<Circuit of {self.model}: {self.graph.count:,} edges by {self.method.value}, "
            f"{self.pairs} pair{'s' if self.pairs != 1 else ''}; {self.kept} kept{faithful}>"
        )

    @property
    def kept(self) -> int:
        """How many edges the circuit holds."""
        return int(self.in_graph.sum())

    @property
    def areas(self) -> Areas | None:
        """MIB's CPR and CMD, where the curve is its ten fractions (``curve=["mib"]``)."""
        return areas_of([(point.fraction, point.faithfulness) for point in self.curve])

    @property
    def nodes(self) -> list[str]:
        """The heads and MLPs the circuit holds (and the input, where an edge leaves it)."""
        held = nodes_of(self.graph, self.in_graph)
        return [name for name, kept in zip(self.graph.upstream, held, strict=True) if kept]

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
        upstream, downstream = ranked(self.graph, self.scores)
        chosen = zip(upstream[:count], downstream[:count], strict=True)
        return [
            (self.graph.upstream[u], self.graph.downstream[d], float(self.scores[u, d]))
            for u, d in chosen
        ]

    def _repr_html_(self) -> str:
        """In a notebook: the one-line header, then the circuit's own page (its graph, an
        edge's score on hover), offline and self-contained."""
        return drawer().circuit_page(self)

    @classmethod
    def load(cls, path: str | Path) -> Circuit:
        """A circuit written by ``circuit -f json`` (or :meth:`document`), read back."""
        return read_circuit(path)

    def kept_edges(self) -> list[tuple[str, str, float]]:
        """The circuit's edges, largest |score| first: (from, to, score)."""
        upstream, downstream = ranked(self.graph, self.scores)
        held = self.in_graph[upstream, downstream]
        return [
            (self.graph.upstream[u], self.graph.downstream[d], float(self.scores[u, d]))
            for u, d in zip(upstream[held], downstream[held], strict=True)
        ]

    def picture(self, format: Output | str = "png", **style: Any) -> Picture:
        """The circuit as a graph (layers bottom to top; edge width by |score|, colour by
        sign) beside its faithfulness curve: what ``circuit --picture`` draws."""
        return drawer().circuit_figure(self, format, style)

    def records(self) -> list[dict[str, object]]:
        """A row per edge, largest |score| first, for a table of data (csv)."""
        upstream, downstream = ranked(self.graph, self.scores)
        kept = self.in_graph
        rows = []
        for rank, (u, d) in enumerate(zip(upstream, downstream, strict=True), 1):
            row: dict[str, object] = {
                "rank": rank,
                "from": self.graph.upstream[u],
                "to": self.graph.downstream[d],
                "score": float(self.scores[u, d]),
                "in_circuit": bool(kept[u, d]),
            }
            if self.exact is not None:
                row["exact"] = bool(self.exact[u, d])
            rows.append(row)
        return rows

    def document(self) -> dict[str, object]:
        """The whole circuit as one JSON document."""
        nodes = list(dict.fromkeys([*self.graph.upstream, *self.graph.downstream]))
        kept = [[first, then] for first, then, _ in self.kept_edges()]
        edges: list[dict[str, object]] = []
        for u, d in zip(*ranked(self.graph, self.scores), strict=True):
            edge = {
                "from": self.graph.upstream[u],
                "to": self.graph.downstream[d],
                "score": float(self.scores[u, d]),
                "in_circuit": bool(self.in_graph[u, d]),
            }
            if self.exact is not None:
                edge["exact"] = bool(self.exact[u, d])
            edges.append(edge)
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
            "bootstrap": self.bootstrap,
            "training": None if self.training is None else self.training._asdict(),
            "metric": self.answer.metric_name,
            "answer": {name: getattr(on, name) for name in _ANSWER_FIELDS},
            "clean_metric": self.clean_metric,
            "corrupt_metric": self.corrupt_metric,
            "promoted": list(self.promoted),
            "nodes": nodes,
            "edges": edges,
            "node_scores": None if self.node_scores is None else self.node_scores.tolist(),
            "circuit": {
                "level": self.level.value,
                "select": self.select.value,
                "asked": self.asked,
                "prune": self.prune,
                "kept": self.kept,
                "nodes": self.nodes,
                "edges": kept,
                "faithfulness": self.faithfulness,
            },
            "curve": [point._asdict() for point in self.curve],
            **dict.fromkeys(Areas._fields) | ({} if areas is None else areas._asdict()),
        }


CIRCUIT_KIND = "circuit"  # what a circuit's document says it is
PATCHED = Intervention.PATCH
# What a circuit's document keeps of its answer (the rest is a head's effects').
_ANSWER_FIELDS = ("answer", "answer_token", "log_prob", "versus", "versus_token", "corrupt")


def read_circuit(path: str | Path) -> Circuit:
    """A circuit written by ``circuit -f json`` (:meth:`Circuit.document`), read back: its
    scores, its mask, its measures; a file that is not one is a usage error naming it."""
    return circuit_of_document(json_document(path), str(path))


def json_document(path: str | Path) -> Any:
    """The JSON document of a circuit's file, read whole; one that cannot be read is a
    usage error naming it."""
    import json

    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as error:
        raise UsageError(f"{path} is not a circuit's JSON document ({error})") from None
    return document


def circuit_of_document(document: Any, where: str) -> Circuit:
    """:func:`read_circuit` of a document read already (``where`` names it in errors)."""
    read = _Reader(document, where)
    if read.document.get("kind") != CIRCUIT_KIND:
        raise UsageError(f'{where} is not a circuit (no "kind": "{CIRCUIT_KIND}"): write one '
                         "with attnviz circuit -f json")  # fmt: skip
    shape = read.part("graph", dict)
    layers, heads, kv_heads = (
        _Reader(shape, where).whole(name) for name in ("layers", "heads", "kv_heads")
    )
    graph = Graph(layers, heads, kv_heads)
    if read.part("nodes", list) != list(dict.fromkeys([*graph.upstream, *graph.downstream])):
        raise UsageError(f"{where}: its nodes are not those of its graph's layers and heads")
    scores, in_graph, exact = _edges(read, graph, where)
    chosen = _Reader(read.part("circuit", dict), f"{where}, its circuit")
    curve = [_Reader(point, f"{where}, its curve") for point in read.part("curve", list)]
    steps = read.document.get("steps")
    return Circuit(
        read.part("model", str),
        graph,
        scores,
        read.choice("method", CircuitMethod),
        None if steps is None else read.whole("steps"),
        read.whole("pairs"),
        _answer(read, where),
        chosen.choice("select", Select),
        chosen.whole("asked")
        if isinstance(chosen.document.get("asked"), int)
        else chosen.number("asked"),
        chosen.part("prune", bool),
        in_graph,
        chosen.optional_number("faithfulness"),
        tuple(
            CurvePoint(
                point.whole("asked"),
                point.whole("kept"),
                point.optional_number("faithfulness"),
                point.number("fraction"),
            )
            for point in curve
        ),
        exact,
        tuple(read.part("promoted", list)),
        None if shape.get("width") is None else _Reader(shape, where).whole("width"),
        chosen.choice("level", Level),
        _node_scores(read.document.get("node_scores"), len(graph.upstream), where),
        read.optional("source", str),
        None if read.document.get("bootstrap") is None else read.whole("bootstrap"),
        _training(read.document.get("training"), where),
        read.choice("ablation", Intervention)
        if "ablation" in read.document
        else Intervention.PATCH,
    )


def _answer(read: _Reader, where: str) -> Answer:
    """The answer a circuit document was scored on, with its clean and corrupted metric."""
    answer = _Reader(read.part("answer", dict), f"{where}, its answer")
    return Answer(
        answer.part("answer", str),
        answer.part("answer_token", str),
        answer.number("log_prob"),
        answer.optional("versus", str),
        answer.optional("versus_token", str),
        read.number("clean_metric"),
        answer.optional("corrupt", str),
        read.number("corrupt_metric"),
        measure=read.part("metric", str),
    )


def _training(value: Any, where: str) -> Training | None:
    """How an optimised circuit's mask was learned, checked; None for another's."""
    if value is None:
        return None
    read = _Reader(value, f"{where}, its training")
    losses = read.part("losses", list)
    if not all(isinstance(each, int | float) and not isinstance(each, bool) for each in losses):
        raise UsageError(f'{where}: its training\'s "losses" are not all numbers')
    sizes = read.part("sizes", list)
    if not all(isinstance(each, int) and not isinstance(each, bool) for each in sizes):
        raise UsageError(f'{where}: its training\'s "sizes" are not all whole numbers')
    return Training(
        read.whole("steps"),
        read.number("learning_rate"),
        read.optional_number("sparsity"),
        tuple(float(each) for each in losses),
        tuple(sizes),
    )


def _edges(
    read: _Reader, graph: Graph, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A document's edges, each checked: every edge's score, whether it is in the circuit,
    and (where the document says) whether it was computed exactly; (U, N) each."""
    scores = np.zeros(graph.edges.shape)
    in_graph = np.zeros(graph.edges.shape, dtype=bool)
    exact = np.zeros(graph.edges.shape, dtype=bool)
    upstream = {name: index for index, name in enumerate(graph.upstream)}
    downstream = {name: index for index, name in enumerate(graph.downstream)}
    seen = np.zeros(graph.edges.shape, dtype=bool)
    refined = False
    for edge in read.part("edges", list):
        each = _Reader(edge, f"{where}, an edge")
        u, d = upstream.get(each.part("from", str), -1), downstream.get(each.part("to", str), -1)
        if u < 0 or d < 0 or not graph.edges[u, d] or seen[u, d]:
            raise UsageError(f"{where}: {edge!r} is no edge of its graph, or is given twice")
        seen[u, d] = True
        scores[u, d] = each.number("score")
        in_graph[u, d] = each.part("in_circuit", bool)
        if "exact" in edge:
            refined = True
            exact[u, d] = each.part("exact", bool)
    if not (seen == graph.edges).all():
        raise UsageError(f"{where} holds {int(seen.sum()):,} of its graph's {graph.count:,} edges")
    return scores, in_graph, exact if refined else None


def _node_scores(value: Any, count: int, where: str) -> np.ndarray | None:
    """A node circuit's node scores, (U,), checked; None for an edge circuit's."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != count
        or not all(isinstance(each, int | float) and not isinstance(each, bool) for each in value)
    ):
        raise UsageError(f'{where}: "node_scores" is not a number for each of its {count} nodes')
    return np.array(value, dtype=np.float64)


class _Reader:
    """The fields of one JSON object of a circuit's document, each checked: a wrong or
    missing one is a usage error naming the file and the field."""

    def __init__(self, document: Any, where: str) -> None:
        if not isinstance(document, dict):
            raise UsageError(f"{where} is not a JSON object: no circuit's document")
        self.document, self.where = document, where

    def part(self, name: str, kind: type) -> Any:
        value = self.document.get(name)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise UsageError(f'{self.where} has no "{name}" {kind.__name__}: no circuit written '
                             "by attnviz circuit -f json, or one cut short")  # fmt: skip
        return value

    def optional(self, name: str, kind: type) -> Any:
        return None if self.document.get(name) is None else self.part(name, kind)

    def number(self, name: str) -> float:
        value = self.document.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return float(self.part(name, float))

    def optional_number(self, name: str) -> float | None:
        return None if self.document.get(name) is None else self.number(name)

    def whole(self, name: str) -> int:
        value = self.part(name, int)
        if value < 0:
            raise UsageError(f'{self.where}: "{name}" is {value}, below 0')
        return int(value)

    def choice(
        self, name: str, kind: type[Select] | type[CircuitMethod] | type[Level] | type[Intervention]
    ) -> Any:
        value = self.part(name, str)
        try:
            return kind(value)
        except ValueError:
            raise UsageError(f'{self.where}: "{name}" is {value!r}, none of attnviz\'s') from None
