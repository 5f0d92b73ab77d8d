"""A circuit found over one text and its corrupted twin, or a dataset of such pairs, in
passes over the pairs whose results add up (so that Ray workers can share the pairs): every
edge scored on each pair (:mod:`attnviz.pretrained.edges`), summed; the top edges of an
estimate computed again exactly where asked (``refine``), summed; then the metric of the
circuits asked for on each pair, summed. The driver (:func:`circuit_of`) turns the sums
into means and the circuit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.bootstrap import bootstrapped, resamples
from attnviz.analysis.circuit import Circuit, CurvePoint, Training, faithfulness_of, ranked
from attnviz.analysis.eap_ig import EapIgGraph, read_scores
from attnviz.analysis.selections import selected
from attnviz.choices import INTERVENTIONS, CircuitMethod, Intervention, Level, Select
from attnviz.circuit_options import DEFAULT_EDGES
from attnviz.errors import UsageError
from attnviz.extractor import pair_error
from attnviz.pretrained.ablated import Ablated, Means, changed_from, text_means
from attnviz.pretrained.answered import Answered, answered
from attnviz.pretrained.circuit_cost import Cost, scoring_cost, unsaid
from attnviz.pretrained.circuit_notes import say_faithfulness, say_pruning_moved
from attnviz.pretrained.circuit_phases import Edge, Phases, Scored
from attnviz.pretrained.differences import parts as record_parts
from attnviz.pretrained.edge_estimates import estimated_scores
from attnviz.pretrained.edges import (
    Runs,
    Wiring,
    exact_scores,
    graph_of,
    read_twins,
)
from attnviz.pretrained.effects import anatomy_of
from attnviz.pretrained.encoding import forward
from attnviz.pretrained.faithfulness import Twins, circuit_metrics
from attnviz.pretrained.optimized import optimized, ranked_scores, starting_logits
from attnviz.progress import FirstPart, advance

if TYPE_CHECKING:
    from attnviz.analysis.graph import Graph
    from attnviz.circuit_options import CircuitOptions
    from attnviz.extractor import Spec
    from attnviz.pretrained.reader import ModelReader
    from attnviz.progress import Listener
    from attnviz.request import Input, Request

_PROMOTED = 1  # tokens a node's label names
Indexed = Sequence[tuple[int, "Input"]]  # pairs, each with its place in the dataset


@dataclass(frozen=True)
class CircuitWork:
    """The work of ``circuit``, as every engine takes it: the pairs (and what names each
    in an error), the model to load and the request (its ``circuit`` field)."""

    inputs: list[Input]
    names: list[str] | None
    spec: Spec
    request: Request
    progress: Listener | None = None


def circuit_of(phases: Phases, options: CircuitOptions) -> Circuit:
    """The circuit the options ask, from the passes over the pairs (its sizes checked
    against the model's graph before any pass; its scores read from a file where the
    options name one)."""
    if options.scores is not None:
        phases = Given(phases, read_scores(options.scores), options.scores)
    graph = phases.graph()
    post_norms = graph.post_norms  # the model's (a file's graph, read below, has none)
    node_level = options.level is Level.NODE
    units = len(graph.upstream) if node_level else graph.count  # what the sizes count
    asked, sizes = options.asked(units), options.sizes(units)
    refine = options.refined(graph.count)
    phases.checked()
    tell_ablation(phases, options, graph)
    optimize = options.method is CircuitMethod.OPTIMIZE
    scored = phases.scored(options.scored_by, options.steps, options.bootstrap)
    count, graph = scored.pairs, scored.graph
    scores, exact = scored.scores / count, scored.exact
    if scored.resampled is not None:  # each edge's sign held over the resamples, or 0
        scores = bootstrapped(scored.resampled, count)
    clean, corrupt = scored.clean / count, scored.corrupt / count
    training = None
    if optimize:
        scores, training = optimized_scores(phases, graph, scores, asked, clean - corrupt, options)
    if refine is not None:
        upstream, downstream = ranked(graph, scores)
        chosen = [(int(u), int(d)) for u, d in zip(upstream, downstream, strict=True)]
        chosen = chosen[:refine]
        values = phases.exact(chosen) / count
        exact = np.zeros(graph.edges.shape, dtype=bool)
        for (u, d), value in zip(chosen, values, strict=True):
            scores[u, d], exact[u, d] = value, True
    nodes = node_scores(phases, graph, scores, scored.method, clean, count) if node_level else None
    masks = [
        selected(graph, scores, options.select, size, options.prune, nodes)
        for size in (asked, *(size for size, _ in sizes))
    ]
    if options.select is Select.THRESHOLD and not masks[0].any():
        largest = float(np.abs(scores[graph.edges]).max())
        raise UsageError(
            f"--threshold {asked:g} keeps no edge: the largest |score| is {largest:.4g}"
        )
    as_chosen = (  # unpruned, to say what pruning did where it can move the metric
        selected(graph, scores, options.select, asked, False, nodes)
        if options.prune and post_norms
        else masks[0]
    )
    compared = bool((as_chosen != masks[0]).any())
    faithful = faithfulness_measured(
        phases, graph, [*masks, as_chosen] if compared else masks, clean, corrupt, count
    )
    kept = int(masks[0].sum())
    if compared:
        say_pruning_moved(int(as_chosen.sum()), kept, faithful.pop(), faithful[0])
    say_faithfulness(faithful[0], kept, node_level)
    answer = replace(scored.answer, clean_metric=clean, corrupt_metric=corrupt)
    curve = [
        CurvePoint(size, int(mask.sum()), value, fraction)
        for (size, fraction), mask, value in zip(sizes, masks[1:], faithful[1:], strict=True)
    ]
    return Circuit(
        scored.model,
        graph,
        scores,
        options.method if optimize else scored.method,
        scored.steps,
        count,
        answer,
        options.select,
        asked,
        options.prune,
        masks[0],
        faithful[0],
        tuple(curve),
        exact,
        phases.promoted(scored.last / count),
        scored.width,
        options.level,
        nodes,
        scored.source,
        options.bootstrap,
        training,
        options.ablation,
    )


def tell_ablation(phases: Phases, options: CircuitOptions, graph: Graph) -> None:
    """The passes told how the nodes are ablated, where no corrupted text gives their
    values: zero, or their means over the pairs (one pass over the pairs' clean texts)."""
    if options.ablation is Intervention.PATCH:
        return
    if options.ablation is Intervention.ZERO:
        phases.ablating(Ablated())
        return
    if phases.pairs < 2:
        raise UsageError(
            "--ablation mean replaces each node's output by its mean over the pairs: give "
            "--pairs FILE.jsonl of two or more (or --ablation zero)"
        )
    if graph.post_norms:
        raise UsageError(
            "--ablation mean: this model's heads share a norm after attention, so a head's "
            "mean output is no output it gives; give --ablation zero or patch"
        )
    phases.ablating(Ablated(phases.means().mean()))


def optimized_scores(
    phases: Phases,
    graph: Graph,
    scores: np.ndarray,
    asked: float,
    gap: float,
    options: CircuitOptions,
) -> tuple[np.ndarray, Training]:
    """The mask learned from ``scores`` (EAP-IG's means), starting with the circuit asked
    for at one half (a threshold's circuit: DEFAULT_EDGES), and its training."""
    if gap == 0:
        raise UsageError(
            "the corrupted texts leave the metric as the clean ones do (their means are "
            "equal): no faithfulness to optimise; give pairs whose twins change the answer"
        )
    size = DEFAULT_EDGES if options.select is Select.THRESHOLD else int(asked)
    learned, training = phases.optimized(
        starting_logits(graph, scores, size), gap, options.training
    )
    return ranked_scores(graph, learned, scores), training


def node_scores(
    phases: Phases,
    graph: Graph,
    scores: np.ndarray,
    method: CircuitMethod,
    clean: float,
    pairs: int,
) -> np.ndarray:
    """Each upstream node's score, (U,): exactly (``method`` exact), the metric with the
    node's output carrying its corrupted value into everything that reads it, less the
    clean metric (a pass over the pairs for each node); else the estimate's, the sum of
    the node's edges' (a node's output reaches every input above it through the residual
    stream, so its gradient is the sum of theirs)."""
    if method is not CircuitMethod.EXACT:
        return np.asarray(scores.sum(axis=1), dtype=np.float64)
    masks = np.repeat(graph.edges[None], len(graph.upstream), axis=0)  # (U, U, N)
    masks[np.arange(len(graph.upstream)), np.arange(len(graph.upstream))] = False
    return np.asarray(phases.measured(masks) / pairs - clean, dtype=np.float64)


def faithfulness_measured(
    phases: Phases,
    graph: Graph,
    masks: list[np.ndarray],
    clean: float,
    corrupt: float,
    pairs: int,
) -> list[float | None]:
    """Each circuit's faithfulness (``masks``, each (U, N) bool): no edge is the corrupted
    run and every edge the clean one, by definition (not run); a circuit given twice is
    measured once, in one pass over the pairs for all of them."""
    keys = [mask.tobytes() for mask in masks]
    between: dict[bytes, np.ndarray] = {}
    for key, mask in zip(keys, masks, strict=True):
        if mask.any() and not (mask == graph.edges).all():
            between.setdefault(key, mask)
    measured: dict[bytes, float] = {}
    if between:
        found = phases.measured(np.stack(list(between.values()))) / pairs
        measured = dict(zip(between, found.tolist(), strict=True))

    def metric(key: bytes, mask: np.ndarray) -> float:
        return measured[key] if key in measured else clean if mask.any() else corrupt

    return [
        faithfulness_of(metric(key, mask), clean, corrupt)
        for key, mask in zip(keys, masks, strict=True)
    ]


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
        if self.circuit.pairs != self.phases.pairs:
            raise UsageError(
                f"--scores {self.path} was scored on {self.circuit.pairs} pair"
                f"{'s' if self.circuit.pairs != 1 else ''}, not {self.phases.pairs}: give the "
                "pairs it was scored on"
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
            found.exact,
            found.width,
            self.path,
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
        (:func:`~attnviz.pretrained.differences.parts`, the last position's first): one,
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
        return Twins(self.wiring, model, asked.arguments, corrupt, asked.metric, self.ablated)

    def answered(self, index: int, given: Input) -> Answered:
        """The pair tokenized and its metric found (a pair's error names its line; its
        corrupted text is not read where the ablation reads none)."""
        if not INTERVENTIONS[self._options.ablation].corrupt:
            given = replace(given, corrupt=None)
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
        parts = runs_of.parts(asked)
        told = unsaid if index else scoring_cost(method, steps, runs_of.count * len(parts))
        alone = _pair_scored(runs_of, index, given, asked, parts[0], method, steps, told)
        for part in parts[1:]:  # the last position's part first: its outputs are the pair's
            _, runs = runs_of(index, given, part, asked)
            alone.scores[...] += estimated_scores(runs, steps)
            del runs  # its record, before the next part's is read
        if drawn is not None:
            alone = replace(alone, resampled=drawn[:, index, None, None] * alone.scores)
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
) -> Scored:
    """One pair's scores (of ``part`` of its positions, where given), its metrics and its
    last position's outputs (``told`` hears how long its first pass took)."""
    asked, runs = runs_of(index, given, part, asked)
    graph = runs.wiring.graph
    if method is CircuitMethod.EXACT:
        upstream, downstream = graph.edge_list()
        scores = np.zeros(graph.edges.shape)
        edges = list(zip(upstream, downstream, strict=True))
        scores[upstream, downstream] = exact_scores(runs, edges, told)
    else:
        scores = estimated_scores(runs, steps, told)
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
    )


def exact_summed(runs_of: PairRuns, pairs: Indexed, edges: list[Edge]) -> np.ndarray:
    """Each edge's exact score, summed over ``pairs`` (a long sweep said of the first)."""
    total = np.zeros(len(edges))
    cost = Cost(
        f"computing the top {len(edges):,} edges exactly",
        runs_of.count,
        "a smaller --refine costs less in proportion",
    )
    for index, given in pairs:
        total += exact_scores(runs_of(index, given)[1], edges, unsaid if index else cost)
        advance("refined pair", index + 1, runs_of.count)
    return total


def measured_summed(runs_of: PairRuns, pairs: Indexed, kept: np.ndarray) -> np.ndarray:
    """Each circuit's metric, summed over ``pairs`` (a long measure said of the first)."""
    cost = Cost(
        f"measuring the faithfulness of {len(kept):,} circuit{'s' if len(kept) != 1 else ''}",
        runs_of.count,
        "each size of --curve is one more pass a pair",
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
    for index, given in pairs:
        runs_of.answered(index, given)


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


def circuited(
    extractor: ModelReader,
    inputs: list[Input],
    request: Request,
    names: list[str] | None = None,
) -> Circuit:
    """The circuit of ``inputs`` (each a text, its answer and its corrupted twin; a
    usage error names the input by ``names``, "pair 1"… by default), read here."""
    assert request.circuit is not None and inputs  # asked of a circuit request, with inputs
    return circuit_of(Here(extractor, request, inputs, names), request.circuit)
