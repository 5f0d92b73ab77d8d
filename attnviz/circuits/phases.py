"""What the passes of a circuit over its pairs give back and how they are asked for: the
sums of scoring (:class:`Scored`) and the phases every engine runs (:class:`Phases`: in
this process, :class:`attnviz.circuits.passes.Here`; over Ray workers,
``attnviz.distributed``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from attnviz.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from attnviz.analysis.effects import Answer
    from attnviz.choices import CircuitMethod
    from attnviz.circuits.ablated import Ablated, Means
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.training import Training

Edge = tuple[int, int]  # (upstream, downstream)


@dataclass(frozen=True)
class Scored:
    """What scoring some pairs adds up: every edge's score (U, N), both runs' metrics and
    every upstream node's clean output at the last position (U, D), each summed over the
    ``pairs``; and the answer of the first of them (its words and measure)."""

    model: str
    graph: Graph
    pairs: int
    scores: np.ndarray
    clean: float
    corrupt: float
    last: np.ndarray
    first: int  # the place of the first pair in the dataset
    answer: Answer
    method: CircuitMethod
    steps: int | None
    exact: np.ndarray | None = None  # (U, N) bool: the edges scored exactly, where some were
    width: int | None = None  # the model's d_model, where known
    source: str | None = None  # the file the scores were read from, where they were
    # (B, U, N) each resample's summed scores, each pair counted as often as it is drawn;
    # (B, K, U, N) each span's share of them, where the scores are split by span
    resampled: np.ndarray | None = None
    # (K, U, N) each span's share of the scores, where they are split by span (``spans``
    # the K names: attnviz.circuits.spans)
    by_span: np.ndarray | None = None
    spans: tuple[str, ...] | None = None

    def added(self, found: np.ndarray) -> Scored:
        """These sums with another part of a pair's positions' scores: (U, N), or (K, U, N)
        where the scores are split by span."""
        if self.by_span is None:
            return replace(self, scores=self.scores + found)
        return replace(self, scores=self.scores + found.sum(0), by_span=self.by_span + found)

    def merged(self, other: Scored) -> Scored:
        """The sums of both (from two workers)."""
        first = self if self.first <= other.first else other
        resampled = None
        if self.resampled is not None and other.resampled is not None:
            resampled = self.resampled + other.resampled
        if self.spans != other.spans:  # each worker's pairs were checked alike
            raise UsageError("the pairs' spans differ: their scores cannot be added up")
        by_span = None
        if self.by_span is not None and other.by_span is not None:
            by_span = self.by_span + other.by_span
        return replace(
            first,
            pairs=self.pairs + other.pairs,
            scores=self.scores + other.scores,
            clean=self.clean + other.clean,
            corrupt=self.corrupt + other.corrupt,
            last=self.last + other.last,
            resampled=resampled,
            by_span=by_span,
        )


class Phases(Protocol):
    """The passes over every pair, each giving back its sum: in this process
    (``attnviz.circuits.passes.Here``), or spread over Ray workers
    (``attnviz.distributed``)."""

    @property
    def pairs(self) -> int:
        """How many pairs the passes go over."""
        ...

    def graph(self) -> Graph:
        """The model's graph, read before any pass."""
        ...

    def checked(self) -> None:
        """Every pair tokenized and checked (its twin's length, its answers), before any
        pass: a bad pair is refused before the first is scored."""
        ...

    def scored(self, method: CircuitMethod, steps: int | None, bootstrap: int | None) -> Scored:
        """Every edge's score summed over the pairs (and over each of ``bootstrap``
        resamples of them, where asked)."""
        ...

    def exact(self, edges: list[Edge]) -> np.ndarray:
        """Each edge's exact score summed over the pairs, (E,); where the scores are split
        by span, (E, 1 + K): the edge's whole patch, then each span's."""
        ...

    def measured(self, kept: np.ndarray) -> np.ndarray:
        """Each circuit's metric (``kept``: (C, U, N)) summed over the pairs, (C,)."""
        ...

    def means(self) -> Means:
        """Each node's output, each clean text's mean over its positions, summed over the
        pairs (:func:`attnviz.circuits.ablated.text_means`)."""
        ...

    def ablating(self, ablated: Ablated) -> None:
        """Every later pass replaces the corrupted run's nodes' outputs as ``ablated``
        says, in the clean text's run (``--ablation zero`` or ``mean``)."""
        ...

    def optimized(
        self, start: np.ndarray, gap: float, training: Training
    ) -> tuple[np.ndarray, Training]:
        """The mask learned over the pairs from the logits ``start`` (U, N), and the
        training with its losses (:func:`attnviz.circuits.optimized.optimized`)."""
        ...

    def promoted(self, last: np.ndarray) -> tuple[str, ...]:
        """Each upstream node's token promoted most by ``last`` (U, D)."""
        ...
