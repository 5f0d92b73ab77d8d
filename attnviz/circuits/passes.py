"""The passes of a circuit over its pairs in this process (:class:`Here`), and each pass
as a Ray worker runs it over its share of the pairs: each pair read (:class:`PairRuns`:
its two runs, or the twins a circuit's pass reads), every edge scored and summed
(:func:`scored`), the top edges computed exactly (:func:`exact_summed`), the circuits
measured (:func:`measured_summed`), the nodes' means (:func:`means_summed`), the mask
trained (:func:`optimized_over`). Each gives back the sum over its pairs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import INTERVENTIONS, CircuitMethod
from attnviz.circuits.ablated import Ablated, Means, changed_from, text_means
from attnviz.circuits.bootstrap import resamples
from attnviz.circuits.cost import Cost, scoring_cost, unsaid
from attnviz.circuits.differences import parts as record_parts
from attnviz.circuits.edges import Runs, Wiring, exact_scores, graph_of, read_twins
from attnviz.circuits.estimates import estimated_scores, rules_of
from attnviz.circuits.faithfulness import Twins, circuit_metrics
from attnviz.circuits.optimized import optimized
from attnviz.circuits.pairs import pair_error
from attnviz.circuits.phases import Edge, Scored
from attnviz.circuits.spans import Spans, check_spans_fit, one_schema, spans_of
from attnviz.errors import UsageError, option
from attnviz.pretrained.anatomy import anatomy_of
from attnviz.pretrained.answered import Answered, answered
from attnviz.pretrained.encoding import forward
from attnviz.progress import FirstPart, advance

if TYPE_CHECKING:
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.options import CircuitOptions
    from attnviz.circuits.training import Training
    from attnviz.inputs import Input
    from attnviz.pretrained.reader import ModelReader
    from attnviz.request import Request

_PROMOTED = 1  # tokens a node's label names
Indexed = Sequence[tuple[int, "Input"]]  # pairs, each with its place in the dataset


class PairRuns:
    """Each pair's two runs, read to score edges (kept across the scoring passes where
    there is one pair, read again for each pass over a dataset: each pair's record is as
    large as its text × every node), or a pair as a circuit's pass reads it
    (:meth:`twins`: no record, the model's wiring found by an earlier read)."""

    def __init__(
        self, extractor: ModelReader, request: Request, count: int, names: list[str] | None
    ) -> None:
        self.extractor, self.request, self.count, self.names = extractor, request, count, names
        self.kept: dict[int, tuple[Answered, Runs]] = {}
        self.wiring: Wiring | None = None  # the model's, found by the first read
        # how the corrupted run's nodes are replaced in the clean text's run, where asked
        # (set by the driver before any pass that reads it: a mean needs the pairs read)
        self.ablated: Ablated | None = None

    def __call__(
        self,
        index: int,
        given: Input,
        part: slice | None = None,
        asked: Answered | None = None,
    ) -> tuple[Answered, Runs]:
        """The pair's runs and their scoring record (of ``part`` of its positions, where
        given: :meth:`parts`; ``asked``: the pair as :meth:`answered` read it, where it
        has been)."""
        if index in self.kept:
            return self.kept[index]
        if asked is None:
            asked = self.answered(index, given)
        try:
            runs = read_twins(
                self.extractor.loaded.model,
                asked.body,
                asked.arguments,
                self._corrupt_arguments(asked),
                asked.metric,
                starts=self._exact,  # only the exact sweeps start from the layers' outputs
                part=part,
                ablated=self.ablated,
            )
        except UsageError as error:
            raise UsageError(pair_error(error, index, self.count, self.names)) from None
        self.wiring = runs.wiring
        if self.count == 1 and part is None:
            self.kept[index] = asked, runs
        return asked, runs

    def parts(self, asked: Answered) -> Sequence[slice | None]:
        """The parts of the pair's positions its estimate reads a record of at a time
        (:func:`~attnviz.circuits.differences.parts`, the last position's first): one,
        the whole, for exact scores, which read any node's record at any time."""
        if self._exact:
            return [None]
        ids = asked.arguments["input_ids"]
        start = changed_from(asked.arguments, self._corrupt_arguments(asked), self.ablated)
        embedding = self.extractor.loaded.model.get_input_embeddings().weight  # (V, D)
        body = asked.body
        found = record_parts(
            graph_of(body),
            slice(start, int(ids.shape[1])),
            int(embedding.shape[1]),
            body.heads * body.head_size,
            embedding.element_size(),
        )
        return [None] if len(found) == 1 else found

    def spans(self, index: int, given: Input, asked: Answered) -> Spans | None:
        """The pair's spans, where the scores are split by span, its own named ones read
        where it has them (a span's error names the pair's line)."""
        options, side = self._options, asked.side
        if not options.positioned:
            return None
        find = side.finder("--spans")
        try:
            found = spans_of(options.spans, options.by_position, side.length, find, given.spans)
        except UsageError as error:
            raise UsageError(pair_error(error, index, self.count, self.names)) from None
        graph, spans = graph_of(asked.body), len(found.names)
        circuits = 1 + len(options.sizes(graph.count * spans)) * len(options.curve_selections)
        check_spans_fit(spans, graph.edges.size, circuits, options.bootstrap or 0)
        return found

    @property
    def _options(self) -> CircuitOptions:
        options = self.request.circuit
        assert options is not None  # a circuit's request
        return options

    @property
    def _exact(self) -> bool:
        return self._options.method is CircuitMethod.EXACT or self._options.refine is not None

    def _corrupt_arguments(self, asked: Answered) -> dict:
        """The corrupted run's arguments: its twin's, or (ablated) the clean text's."""
        if not INTERVENTIONS[self._options.ablation].corrupt:
            assert self.ablated is not None  # set before any pass (circuit.ablated)
            return asked.arguments
        assert asked.corrupt_arguments is not None  # check_asked's
        return asked.corrupt_arguments

    def twins(self, index: int, given: Input) -> Twins:
        """The pair as a circuit's pass reads it."""
        self.kept.pop(index, None)  # its scoring record, read no more, goes first
        if self.wiring is None:  # no pair read here yet (a worker that scored none)
            self(index, given)
            self.kept.pop(index, None)
        assert self.wiring is not None  # found by the read
        asked = self.answered(index, given)
        model, corrupt = self.extractor.loaded.model, self._corrupt_arguments(asked)
        return Twins(
            self.wiring,
            model,
            asked.arguments,
            corrupt,
            asked.metric,
            self.ablated,
            self.spans(index, given, asked),
        )

    def answered(self, index: int, given: Input) -> Answered:
        """The pair tokenized and its metric found (a pair's error names its line; its
        corrupted text the one its intervention gives it:
        :func:`~attnviz.circuits.pairs.as_passes_read`)."""
        try:
            return answered(self.extractor, given, self.request)
        except UsageError as error:
            raise UsageError(pair_error(error, index, self.count, self.names)) from None


def scored(
    runs_of: PairRuns,
    pairs: Indexed,
    method: CircuitMethod,
    steps: int | None,
    bootstrap: int | None = None,
) -> Scored:
    """Every edge's score, both metrics and the last position's outputs, summed over
    ``pairs`` (a long scoring said after the dataset's first pair's first pass), and with
    ``bootstrap`` B each resample's sum too, each pair as often as the resample draws it
    (the draws are the dataset's, made alike in every worker)."""
    drawn = None if bootstrap is None else resamples(bootstrap, runs_of.count)  # (B, n)
    found: Scored | None = None
    for index, given in pairs:
        asked = runs_of.answered(index, given)
        parts, spans = runs_of.parts(asked), runs_of.spans(index, given, asked)
        told = unsaid if index else scoring_cost(method, steps, runs_of.count * len(parts))
        alone = _pair_scored(runs_of, index, given, asked, parts[0], method, steps, told, spans)
        for part in parts[1:]:  # the last position's part first: its outputs are the pair's
            _, runs = runs_of(index, given, part, asked)
            alone = alone.added(estimated_scores(runs, steps, rules=rules_of(method), spans=spans))
            del runs  # its record, before the next part's is read
        if drawn is not None:
            shares = alone.scores if alone.by_span is None else alone.by_span  # by span: each
            alone = replace(alone, resampled=np.einsum("b,...->b...", drawn[:, index], shares))
        found = alone if found is None else found.merged(alone)
        advance("scored pair", index + 1, runs_of.count)
    assert found is not None  # asked of at least one pair
    return found


def _pair_scored(
    runs_of: PairRuns,
    index: int,
    given: Input,
    asked: Answered,
    part: slice | None,
    method: CircuitMethod,
    steps: int | None,
    told: FirstPart,
    spans: Spans | None,
) -> Scored:
    """One pair's scores (of ``part`` of its positions, where given; by span, where
    ``spans`` are given), its metrics and its last position's outputs (``told`` hears how
    long its first pass took)."""
    asked, runs = runs_of(index, given, part, asked)
    graph = runs.wiring.graph
    if method is CircuitMethod.EXACT:
        scores, by_span = _exact_pair(runs, told, spans)
    else:
        found = estimated_scores(runs, steps, told, rules_of(method), spans)
        by_span = None if spans is None else found  # (K, U, N)
        scores = found if spans is None else found.sum(0)
    return Scored(
        runs_of.extractor.name,
        graph,
        1,
        scores,
        runs.clean.metric,
        runs.corrupt_metric,
        runs.clean_last.float().cpu().numpy(),
        index,
        asked.answer(log_prob=runs.clean.log_prob),
        method,
        steps,
        width=int(runs.clean_last.shape[-1]),
        by_span=by_span,
        spans=None if spans is None else spans.names,
    )


def _exact_pair(
    runs: Runs, told: FirstPart, spans: Spans | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Every edge's exact score, (U, N), and with ``spans`` each span's, (K, U, N): the
    edge carrying the corrupted value at that span's positions alone (a patch of its own:
    the spans' need not sum to the edge's, which is measured too)."""
    graph = runs.wiring.graph
    upstream, downstream = graph.edge_list()
    edges = list(zip(upstream, downstream, strict=True))
    scores = np.zeros(graph.edges.shape)
    scores[upstream, downstream] = exact_scores(runs, edges, told)
    if spans is None:
        return scores, None
    by_span = np.zeros((len(spans.names), *graph.edges.shape))
    by_span[:, upstream, downstream] = exact_scores(runs, edges, unsaid, spans).T
    return scores, by_span


def exact_summed(runs_of: PairRuns, pairs: Indexed, edges: list[Edge]) -> np.ndarray:
    """Each edge's exact score, summed over ``pairs`` (a long sweep said of the first):
    (E,), or where the scores are split by span (E, 1 + K), the edge's whole patch then
    each span's, a patch of its own."""
    total: np.ndarray | None = None
    cost = Cost(
        f"computing the top {len(edges):,} edges exactly",
        runs_of.count,
        (f"a smaller {option('--refine')} costs less in proportion",),
    )
    for index, given in pairs:
        asked = runs_of.answered(index, given)
        runs = runs_of(index, given, asked=asked)[1]
        found = exact_scores(runs, edges, unsaid if index else cost)
        spans = runs_of.spans(index, given, asked)
        if spans is not None:
            found = np.column_stack([found, exact_scores(runs, edges, unsaid, spans)])
        total = found if total is None else total + found
        advance("refined pair", index + 1, runs_of.count)
    assert total is not None  # asked of at least one pair
    return total


def measured_summed(runs_of: PairRuns, pairs: Indexed, kept: np.ndarray) -> np.ndarray:
    """Each circuit's metric, summed over ``pairs`` (a long measure said of the first)."""
    cost = Cost(
        f"measuring the faithfulness of {len(kept):,} circuit{'s' if len(kept) != 1 else ''}",
        runs_of.count,
        (f"each size of {option('--curve')} is one more pass a pair",),
    )
    found = []
    for index, given in pairs:
        found.append(circuit_metrics(runs_of.twins(index, given), kept, unsaid if index else cost))
        advance("measured pair", index + 1, runs_of.count)
    return np.sum(found, axis=0)


def optimized_over(
    runs_of: PairRuns, pairs: Indexed, start: np.ndarray, gap: float, training: Training
) -> tuple[np.ndarray, Training]:
    """The mask learned over ``pairs`` (all of them: each step reads one), each pair read
    once (its twins are small: its arguments and metric)."""
    read: dict[int, Twins] = {}

    def twins_of(place: int) -> Twins:
        if place not in read:
            index, given = pairs[place]
            read[place] = runs_of.twins(index, given)
        return read[place]

    return optimized(twins_of, len(pairs), start, gap, training)


def means_summed(runs_of: PairRuns, pairs: Indexed) -> Means:
    """Each node's output, each clean text's mean over its positions, summed over ``pairs``."""
    found: Means | None = None
    model = runs_of.extractor.loaded.model
    for index, given in pairs:
        asked = runs_of.answered(index, given)
        alone = text_means(model, asked.body, asked.arguments)
        found = alone if found is None else found.merged(alone)
        advance("averaged pair", index + 1, runs_of.count)
    assert found is not None  # asked of at least one pair
    return found


def pairs_checked(runs_of: PairRuns, pairs: Indexed) -> None:
    """Each pair tokenized and checked, as a pass would read it (no pass runs)."""
    first: Spans | None = None
    for index, given in pairs:
        spans = runs_of.spans(index, given, runs_of.answered(index, given))
        if spans is not None:
            first = first or spans
            try:
                one_schema(first, spans)
            except UsageError as error:
                raise UsageError(pair_error(error, index, runs_of.count, runs_of.names)) from None


def graph_of_model(extractor: ModelReader) -> Graph:
    """The graph of the extractor's model, read from its modules (no text is run)."""
    return graph_of(anatomy_of(extractor.loaded, "a circuit"))


def promoted(extractor: ModelReader, last: np.ndarray) -> tuple[str, ...]:
    """Each upstream node's token promoted most: its mean output at the last position,
    (U, D), read through the unembedding."""
    import torch

    unembedding = anatomy_of(extractor.loaded).unembedding.weight
    with torch.inference_mode():
        written = torch.as_tensor(last, device=unembedding.device)
        logits = written @ unembedding.float().T  # (U, V)
        best = torch.topk(logits, _PROMOTED, dim=-1).indices[:, 0]
    # the tokenizer's own decoding (a space, not a byte-level vocabulary's Ġ), which the
    # pictures show with its spaces visible
    decode = extractor.loaded.tokenizer.decode
    return tuple(decode([int(token)]) for token in best)


@dataclass
class Here:
    """Every pass over the pairs in this process, on one loaded model."""

    extractor: ModelReader
    request: Request
    inputs: list[Input]
    names: list[str] | None

    def __post_init__(self) -> None:
        self.runs_of = PairRuns(self.extractor, self.request, len(self.inputs), self.names)
        self.indexed = list(enumerate(self.inputs))

    def _passing(self, run: Callable[[], Any]) -> Any:
        with forward(self.extractor.loaded):
            return run()

    @property
    def pairs(self) -> int:
        return len(self.inputs)

    def graph(self) -> Graph:
        return graph_of_model(self.extractor)

    def checked(self) -> None:
        pairs_checked(self.runs_of, self.indexed)

    def scored(self, method: CircuitMethod, steps: int | None, bootstrap: int | None) -> Scored:
        return self._passing(lambda: scored(self.runs_of, self.indexed, method, steps, bootstrap))

    def exact(self, edges: list[Edge]) -> np.ndarray:
        return self._passing(lambda: exact_summed(self.runs_of, self.indexed, edges))

    def measured(self, kept: np.ndarray) -> np.ndarray:
        return self._passing(lambda: measured_summed(self.runs_of, self.indexed, kept))

    def means(self) -> Means:
        return self._passing(lambda: means_summed(self.runs_of, self.indexed))

    def ablating(self, ablated: Ablated) -> None:
        self.runs_of.ablated = ablated

    def optimized(
        self, start: np.ndarray, gap: float, training: Training
    ) -> tuple[np.ndarray, Training]:
        return self._passing(
            lambda: optimized_over(self.runs_of, self.indexed, start, gap, training)
        )

    def promoted(self, last: np.ndarray) -> tuple[str, ...]:
        return promoted(self.extractor, last)
