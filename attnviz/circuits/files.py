"""A circuit's file read back: the JSON document ``circuit -f json`` writes
(:meth:`attnviz.circuits.circuit.Circuit.document`), read once (a pipe too) and no larger
than :data:`MOST_CIRCUIT_BYTES`, every field checked before anything is built: the graph's
shape as a model's could be and against the edges given, every edge present once, every
number finite. A file that is not one is a usage error naming it and the field."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from attnviz.analysis.effects import Answer
from attnviz.choices import INTERVENTIONS, Ablation, CircuitMethod, Count, Level, Select
from attnviz.circuits.circuit import CIRCUIT_KIND, Circuit, CurvePoint, Pair
from attnviz.circuits.graph import Graph
from attnviz.circuits.scored import ScoredGraph
from attnviz.circuits.training import Training
from attnviz.errors import UsageError


def read_circuit(path: str | Path) -> Circuit:
    """A circuit written by ``circuit -f json`` (:meth:`Circuit.document`), read back: its
    scores, its mask, its measures; a file that is not one is a usage error naming it."""
    return circuit_of_document(json_document(path), str(path))


# The largest circuit file read: a graph of about two million edges (a SmolLM2 circuit's
# -f json is 7 MB); past it a file is refused as it is read (a pipe, /dev/zero).
MOST_CIRCUIT_BYTES = 256 << 20


def json_document(path: str | Path) -> Any:
    """The JSON document of a circuit's file, read once (a pipe too) and whole, up to
    :data:`MOST_CIRCUIT_BYTES`; one that cannot be read is a usage error naming it."""
    import json

    try:
        with Path(path).open("rb") as stream:
            data = stream.read(MOST_CIRCUIT_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    if len(data) > MOST_CIRCUIT_BYTES:
        raise UsageError(
            f"{path} is longer than {MOST_CIRCUIT_BYTES >> 20} MiB: no circuit's file attnviz reads"
        )
    try:
        document = json.loads(data.decode("utf-8-sig"), parse_constant=_no_constant)
    except UnicodeDecodeError as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    except (json.JSONDecodeError, RecursionError, ValueError) as error:
        raise UsageError(f"{path} is not a circuit's JSON document ({error})") from None
    return document


def _no_constant(name: str) -> Any:
    """JSON has no NaN or Infinity: a file that writes one is refused where it does."""
    raise ValueError(f"{name} is no JSON number")


def circuit_of_document(document: Any, where: str) -> Circuit:
    """:func:`read_circuit` of a document read already (``where`` names it in errors)."""
    read = _Reader(document, where)
    if read.document.get("kind") != CIRCUIT_KIND:
        raise UsageError(f'{where} is not a circuit (no "kind": "{CIRCUIT_KIND}"): write one '
                         "with attnviz circuit -f json")  # fmt: skip
    shape = read.part("graph", dict)
    graph = _graph(_Reader(shape, where), len(read.part("edges", list)), where)
    if read.part("nodes", list) != list(dict.fromkeys([*graph.upstream, *graph.downstream])):
        raise UsageError(f"{where}: its nodes are not those of its graph's layers and heads")
    chosen = _Reader(read.part("circuit", dict), f"{where}, its circuit")
    # a circuit written before it said how its edges were counted counted attnviz's
    counted = chosen.choice("count", Count) if "count" in chosen.document else Count.GROUPED
    scored = replace(_edges(read, graph, where), count=counted)
    curve = [_Reader(point, f"{where}, its curve") for point in read.part("curve", list)]
    select = chosen.choice("select", Select)
    steps = read.document.get("steps")
    return Circuit(
        read.part("model", str),
        scored,
        read.choice("method", CircuitMethod),
        None if steps is None else read.whole("steps"),
        read.whole("pairs"),
        _answer(read, where),
        select,
        chosen.whole("asked")
        if isinstance(chosen.document.get("asked"), int)
        else chosen.number("asked"),
        chosen.part("prune", bool),
        chosen.optional_number("faithfulness"),
        tuple(
            CurvePoint(
                point.whole("asked"),
                point.whole("kept"),
                point.optional_number("faithfulness"),
                point.number("fraction"),
                # a curve written before its points named their selection had one
                point.choice("select", Select) if "select" in point.document else select,
            )
            for point in curve
        ),
        tuple(read.part("promoted", list)),
        None if shape.get("width") is None else _Reader(shape, where).whole("width"),
        chosen.choice("level", Level),
        _node_scores(read.document.get("node_scores"), len(graph.upstream), where),
        read.optional("source", str),
        None if read.document.get("bootstrap") is None else read.whole("bootstrap"),
        _training(read.document.get("training"), where),
        read.choice("ablation", Ablation, INTERVENTIONS)
        if "ablation" in read.document
        else Ablation.PATCH,
        _inputs(read.document.get("inputs", []), where),
    )


def _inputs(value: Any, where: str) -> tuple[Pair, ...]:
    """The pairs a circuit document was scored on, each checked."""
    if not isinstance(value, list):
        raise UsageError(f'{where}: its "inputs" are no list of pairs')
    found = []
    for each in value:
        pair = _Reader(each, f"{where}, a pair of its inputs")
        found.append(
            Pair(
                pair.part("text", str),
                pair.part("answer", str),
                pair.optional("versus", str),
                pair.optional("corrupt", str),
            )
        )
    return tuple(found)


def _graph(shape: _Reader, given: int, where: str) -> Graph:
    """A document's graph, its shape checked as a model's could be, and against the
    ``given`` edges before its arrays are made (a file of 3 edges naming 100,000 layers
    is refused at once)."""
    layers, heads, kv_heads = (shape.whole(name) for name in ("layers", "heads", "kv_heads"))
    if min(layers, heads, kv_heads) < 1 or heads % kv_heads:
        raise UsageError(
            f"{where}: its graph of {layers} layers × {heads} heads with {kv_heads} key/value "
            "heads is no model's (at least one of each, the heads an equal share of each "
            "key/value head)"
        )
    count = Graph.edges_of(layers, heads, kv_heads)
    if given != count:
        raise UsageError(f"{where} holds {given:,} of its graph's {count:,} edges")
    return Graph(layers, heads, kv_heads)


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
    if not all(finite_number(each) for each in losses):
        raise UsageError(f'{where}: its training\'s "losses" are not all finite numbers')
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


def _edges(read: _Reader, graph: Graph, where: str) -> ScoredGraph:
    """A document's edges, each checked: every edge's score, whether it is in the circuit,
    and (where the document says) whether it was computed exactly."""
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
    spans, by_span = _by_span(read, graph, where)
    if spans and any("kept_at" in edge for edge in read.part("edges", list)):
        in_graph = _kept_at(read, graph, spans, where)
    return ScoredGraph(
        graph, scores, in_graph, exact if refined else None, by_span=by_span, spans=spans
    )


def _kept_at(read: _Reader, graph: Graph, spans: tuple[str, ...], where: str) -> np.ndarray:
    """A circuit by span's (edge, span) pairs, (K, U, N), from each edge's ``kept_at``."""
    upstream = {name: index for index, name in enumerate(graph.upstream)}
    downstream = {name: index for index, name in enumerate(graph.downstream)}
    kept = np.zeros((len(spans), *graph.edges.shape), dtype=bool)
    for edge in read.part("edges", list):
        at = edge.get("kept_at")
        if not isinstance(at, list) or not set(at) <= set(spans):
            raise UsageError(f"{where}: {edge!r} keeps no list of its spans")
        for span in at:
            kept[spans.index(span), upstream[edge["from"]], downstream[edge["to"]]] = True
    return kept


def _by_span(read: _Reader, graph: Graph, where: str) -> tuple[tuple[str, ...], np.ndarray | None]:
    """A document's spans and each edge's share of its score in each, (K, U, N); none for a
    document whose scores were not split by span."""
    names = read.document.get("spans")
    if names is None:
        return (), None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise UsageError(f'{where}: its "spans" are no list of span names')
    upstream = {name: index for index, name in enumerate(graph.upstream)}
    downstream = {name: index for index, name in enumerate(graph.downstream)}
    by_span = np.zeros((len(names), *graph.edges.shape))
    for edge in read.part("edges", list):
        shares = edge.get("by_span")
        if not isinstance(shares, dict) or list(shares) != names:
            raise UsageError(f"{where}: {edge!r} has no score for each of its spans {names}")
        each = _Reader(shares, f"{where}, an edge's spans")
        u, d = upstream[edge["from"]], downstream[edge["to"]]  # checked by _edges
        by_span[:, u, d] = [each.number(name) for name in names]
    return tuple(names), by_span


def _node_scores(value: Any, count: int, where: str) -> np.ndarray | None:
    """A node circuit's node scores, (U,), checked; None for an edge circuit's."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != count
        or not all(finite_number(each) for each in value)
    ):
        raise UsageError(
            f'{where}: "node_scores" is not a finite number for each of its {count} nodes'
        )
    return np.array(value, dtype=np.float64)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite_number(value: Any) -> TypeGuard[int | float]:
    """Whether ``value`` is a JSON number that a float holds and is finite (1e309 reads
    as infinity)."""
    if not _is_number(value):
        return False
    try:
        return bool(np.isfinite(float(value)))
    except OverflowError:  # an integer past float's range
        return False


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
        if not _is_number(value):
            return float(self.part(name, float))  # refused: its message
        if not finite_number(value):
            raise UsageError(f'{self.where}: "{name}" is {value:.4g}, not a finite number')
        return float(value)

    def optional_number(self, name: str) -> float | None:
        return None if self.document.get(name) is None else self.number(name)

    def whole(self, name: str) -> int:
        value = self.part(name, int)
        if value < 0:
            raise UsageError(f'{self.where}: "{name}" is {value}, below 0')
        return int(value)

    def choice(
        self,
        name: str,
        kind: type[Select] | type[CircuitMethod] | type[Level] | type[Ablation] | type[Count],
        among: Iterable[Any] | None = None,
    ) -> Any:
        """The word ``name`` holds, of ``kind`` (of those ``among`` them, if given)."""
        value = self.part(name, str)
        if value not in {member.value for member in (kind if among is None else among)}:
            raise UsageError(f'{self.where}: "{name}" is {value!r}, none of attnviz\'s')
        return kind(value)
