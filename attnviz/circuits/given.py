"""A circuit's scores read from a file (``--scores``) standing in for the scoring pass:
:class:`Given` wraps the passes over the pairs, answers the scoring from the file (a
circuit's JSON document, or EAP-IG's graph file read against this model's graph) and
hands every other pass (exact edges, circuits measured, means, training) to the passes
as ever."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import CircuitMethod
from attnviz.circuits.eap_ig import EapIgGraph
from attnviz.circuits.phases import Edge, Phases, Scored
from attnviz.errors import UsageError

if TYPE_CHECKING:
    from attnviz.circuits.ablated import Ablated, Means
    from attnviz.circuits.circuit import Circuit
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.training import Training


@dataclass(frozen=True)
class Given:
    """The passes of a circuit whose scores were read from a file (``--scores``): the
    scoring pass is the file's; computing edges exactly and measuring circuits run over
    the pairs as ever, which must be the file's pairs (their count is checked). EAP-IG's
    graph file holds no metrics: one EAP pass a pair reads them (and the answer)."""

    phases: Phases
    circuit: Circuit | EapIgGraph
    path: str

    @property
    def pairs(self) -> int:
        return self.phases.pairs

    def graph(self) -> Graph:
        if isinstance(self.circuit, EapIgGraph):
            graph = self.phases.graph()
            self.circuit.on(graph)  # refused now if it is not this model's graph
            return graph
        graph, given = self.phases.graph(), self.circuit.graph
        shape = (graph.layers, graph.heads, graph.kv_heads)
        if shape != (given.layers, given.heads, given.kv_heads):
            raise UsageError(
                f"--scores {self.path} is the circuit of a model of {given.layers} layers × "
                f"{given.heads} heads ({given.kv_heads} key/value heads); this model has "
                f"{graph.layers} × {graph.heads} ({graph.kv_heads})"
            )
        return graph

    def checked(self) -> None:
        self.phases.checked()

    def scored(self, method: CircuitMethod, steps: int | None, bootstrap: int | None) -> Scored:
        assert bootstrap is None  # refused with --scores (CircuitOptions)
        if isinstance(self.circuit, EapIgGraph):
            read = self.phases.scored(CircuitMethod.GRADIENT, None, None)
            scores, _ = self.circuit.on(read.graph)
            return replace(read, scores=scores * read.pairs, source=self.path)
        found, count = self.circuit, self.circuit.pairs
        return Scored(
            found.model,
            found.graph,
            count,
            found.scores * count,
            found.clean_metric * count,
            found.corrupt_metric * count,
            np.zeros((len(found.graph.upstream), 1)),  # promoted is the file's
            0,
            found.answer,
            found.method,
            found.steps,
            found.scored.exact,
            found.width,
            self.path,
            by_span=None if found.scored.by_span is None else found.scored.by_span * count,
            spans=found.scored.spans or None,
        )

    def exact(self, edges: list[Edge]) -> np.ndarray:
        return self.phases.exact(edges)

    def measured(self, kept: np.ndarray) -> np.ndarray:
        return self.phases.measured(kept)

    def means(self) -> Means:
        return self.phases.means()

    def ablating(self, ablated: Ablated) -> None:
        self.phases.ablating(ablated)

    def optimized(
        self, start: np.ndarray, gap: float, training: Training
    ) -> tuple[np.ndarray, Training]:
        return self.phases.optimized(start, gap, training)

    def promoted(self, last: np.ndarray) -> tuple[str, ...]:
        if isinstance(self.circuit, EapIgGraph):
            return self.phases.promoted(last)
        return self.circuit.promoted
