"""A circuit found over one text and its corrupted twin, or a dataset of such pairs, in
passes over the pairs whose results add up (so that Ray workers can share the pairs,
:mod:`attnviz.circuits.passes`): every edge scored on each pair
(:mod:`attnviz.circuits.edges`), summed; the top edges of an estimate computed again
exactly where asked (``refine``), summed; then the metric of the circuits asked for on
each pair, summed. The driver (:func:`circuit_of`) turns the sums into means and the
circuit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from attnviz.asked import pair_of
from attnviz.choices import Ablation, CircuitMethod, Count, Level, Select
from attnviz.circuits.ablated import Ablated
from attnviz.circuits.bootstrap import bootstrapped
from attnviz.circuits.circuit import (
    Circuit,
    CurvePoint,
    changes_nothing,
    faithfulness_of,
)
from attnviz.circuits.given import Given
from attnviz.circuits.ilp import check_ilp_size
from attnviz.circuits.notes import say_counted_alike, say_faithfulness, say_pruning_moved
from attnviz.circuits.optimized import ranked_scores, starting_logits, tiered_scores
from attnviz.circuits.options import DEFAULT_EDGES
from attnviz.circuits.phases import Phases, Scored
from attnviz.circuits.scored import ScoredGraph
from attnviz.circuits.selections import selected
from attnviz.circuits.training import Training
from attnviz.errors import UsageError

if TYPE_CHECKING:
    from attnviz.circuits.graph import Graph
    from attnviz.circuits.options import CircuitOptions
    from attnviz.inputs import Input


def circuit_of(phases: Phases, options: CircuitOptions, inputs: list[Input]) -> Circuit:
    """The circuit the options ask, from the passes over the pairs, ``inputs`` (its sizes
    checked against the model's graph before any pass; its scores a file's where the
    options name one)."""
    if options.given is not None:
        assert options.scores is not None  # what it was read from
        phases = Given(phases, options.given, options.scores)
    graph = phases.graph()
    post_norms = graph.post_norms  # the model's (a file's graph, read below, has none)
    node_level = options.level is Level.NODE
    # what the sizes count: nodes, or edges as counted
    units = len(graph.upstream) if node_level else int(graph.copies(options.count).sum())
    # by span, (edge, span) pairs: by position, known once the pairs are read
    sized = None if options.by_position else _sized(options, units, _spans(options))
    refine = _checked_before_passes(phases, options, graph)
    scored = phases.scored(options.scored_by, options.steps, options.bootstrap)
    asked, sizes = sized or _sized(options, units, len(scored.spans or ()))
    count, graph = scored.pairs, scored.graph
    clean, corrupt = scored.clean / count, scored.corrupt / count
    means, training = _scores_asked(phases, options, scored, asked, refine)
    nodes = node_scores(phases, means, scored.method, clean, count) if node_level else None
    points = [
        (size, fraction, rule) for rule in options.curve_selections for size, fraction in sizes
    ]
    curve_sizes = [(float(size), rule) for size, _, rule in points]
    chosen, as_chosen = _chosen(means, options, asked, curve_sizes, nodes, post_norms)
    faithful = _faithfulness(phases, graph, chosen, as_chosen, clean, corrupt, count)
    say_faithfulness(faithful[0], chosen[0].kept, node_level, options.count is Count.UNGROUPED)
    answer = replace(scored.answer, clean_metric=clean, corrupt_metric=corrupt)
    curve = [
        CurvePoint(size, each.kept, value, fraction, rule)
        for (size, fraction, rule), each, value in zip(
            points, chosen[1:], faithful[1:], strict=True
        )
    ]
    return Circuit(
        scored.model,
        chosen[0],
        scored.method if training is None else options.method,
        scored.steps,
        count,
        answer,
        options.select,
        asked,
        options.prune,
        faithful[0],
        tuple(curve),
        phases.promoted(scored.last / count),
        scored.width,
        options.level,
        nodes,
        scored.source,
        options.bootstrap,
        training,
        options.ablation,
        tuple(pair_of(given, options.ablation) for given in inputs),
    )


def _checked_before_passes(phases: Phases, options: CircuitOptions, graph: Graph) -> int | None:
    """What is checked, said and told before any pass: how many edges are refined
    (checked against the graph), the ILP's size, every pair, a count alike either way,
    the ablation. The refined count."""
    refine = options.refined(graph.count)
    if Select.ILP in (options.select, *options.curve_selections):
        check_ilp_size(graph)
    phases.checked()
    if options.count is Count.UNGROUPED and graph.kv_heads == graph.heads:
        say_counted_alike()
    tell_ablation(phases, options, graph)
    return refine


def _sized(
    options: CircuitOptions, units: int, spans: int
) -> tuple[float, list[tuple[int, float]]]:
    """The circuit's size (or threshold) and the curve's, among ``units`` × ``spans``."""
    return options.asked(units * spans), options.sizes(units * spans)


def _spans(options: CircuitOptions) -> int:
    """How many spans each edge is scored at: the spans named and the rest, or one."""
    return len(options.spans) + 1 if options.spans else 1


def _scores_asked(
    phases: Phases, options: CircuitOptions, scored: Scored, asked: float, refine: int | None
) -> tuple[ScoredGraph, Training | None]:
    """The graph with the edges' mean scores over the pairs as the options ask them: each
    edge's sign held over the bootstrap's resamples (or 0), or a mask trained from them
    (``optimize``, with its training), the estimate's top ``refine`` again exactly where
    asked (and which those are)."""
    count, graph = scored.pairs, scored.graph
    scores, training = scored.scores / count, None
    by_span = None if scored.by_span is None else scored.by_span / count
    if scored.resampled is not None:  # by span, each share's sign held: the edge's their sum
        held = bootstrapped(scored.resampled, count)
        scores, by_span = (held, None) if by_span is None else (held.sum(0), held)
    if options.method is CircuitMethod.OPTIMIZE:
        metrics = (scored.clean / count, scored.corrupt / count)
        scores, training = optimized_scores(phases, graph, scores, asked, metrics, options)
    means = ScoredGraph(
        graph,
        scores,
        exact=scored.exact,
        count=options.count,
        by_span=by_span,
        spans=scored.spans or (),
    )
    return (means if refine is None else refined(phases, means, refine, count)), training


def _chosen(
    scored: ScoredGraph,
    options: CircuitOptions,
    asked: float,
    curve: list[tuple[float, Select]],
    nodes: np.ndarray | None,
    post_norms: bool,
) -> tuple[list[ScoredGraph], ScoredGraph]:
    """The circuit the options ask (of ``asked`` edges, or by their threshold), then the
    circuit of each (size, selection) of ``curve``, each chosen from ``scored``; and the
    first unpruned, to say what pruning did where it can move the metric (``post_norms``:
    a norm after attention scales a layer's heads together), else the first itself."""
    chosen = [
        selected(scored, rule, size, options.prune, nodes)
        for size, rule in ((asked, options.select), *curve)
    ]
    if options.select is Select.THRESHOLD and not chosen[0].circuit.any():
        raise UsageError(
            f"--threshold {asked:g} keeps no edge: the largest |score| is {scored.largest():.4g}"
        )
    if not (options.prune and post_norms):
        return chosen, chosen[0]
    return chosen, selected(scored, options.select, asked, False, nodes)


def _faithfulness(
    phases: Phases,
    graph: Graph,
    chosen: list[ScoredGraph],
    as_chosen: ScoredGraph,
    clean: float,
    corrupt: float,
    count: int,
) -> list[float | None]:
    """Each circuit's faithfulness, in one pass over the pairs; where pruning changed the
    circuit (``as_chosen`` is the unpruned one), what it did to the metric is said."""
    masks = [each.measured for each in chosen]  # (U, N), or (K, U, N) by span
    compared = bool((as_chosen.measured != masks[0]).any())
    measured = [*masks, as_chosen.measured] if compared else masks
    faithful = faithfulness_measured(phases, graph, measured, clean, corrupt, count)
    if compared:
        say_pruning_moved(as_chosen.kept, chosen[0].kept, faithful.pop(), faithful[0])
    return faithful


def refined(phases: Phases, scored: ScoredGraph, refine: int, pairs: int) -> ScoredGraph:
    """The top ``refine`` edges of ``scored`` computed exactly (the means over the
    ``pairs``; by span, each span's share too, a patch of its own), and which they are."""
    upstream, downstream = scored.ranked()
    chosen = [(int(u), int(d)) for u, d in zip(upstream[:refine], downstream[:refine], strict=True)]
    values = phases.exact(chosen) / pairs  # (E,), or by span (E, 1 + K)
    scores, exact = scored.scores.copy(), np.zeros(scored.graph.edges.shape, dtype=bool)
    by_span = None if scored.by_span is None else scored.by_span.copy()
    for (u, d), value in zip(chosen, values, strict=True):
        exact[u, d] = True
        if by_span is None:
            scores[u, d] = value
        else:
            scores[u, d], by_span[:, u, d] = value[0], value[1:]
    return replace(scored, scores=scores, exact=exact, by_span=by_span)


def tell_ablation(phases: Phases, options: CircuitOptions, graph: Graph) -> None:
    """The passes told how the nodes are ablated, where no corrupted text gives their
    values (:data:`ABLATED`)."""
    made = ABLATED.get(options.ablation)
    if made is not None:
        phases.ablating(made(phases, graph))


def _zeroed(phases: Phases, graph: Graph) -> Ablated:
    return Ablated()


def _averaged(phases: Phases, graph: Graph) -> Ablated:
    """Each node's output replaced by its mean over the pairs (one pass over the pairs'
    clean texts)."""
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
    return Ablated(phases.means().mean())


# What each intervention that runs no corrupted twin (its row's twins give none) puts in
# place of every node's output, made from the passes over the pairs.
ABLATED: dict[Ablation, Callable[[Phases, Graph], Ablated]] = {
    Ablation.ZERO: _zeroed,
    Ablation.MEAN: _averaged,
}


def optimized_scores(
    phases: Phases,
    graph: Graph,
    scores: np.ndarray,
    asked: float,
    metrics: tuple[float, float],
    options: CircuitOptions,
) -> tuple[np.ndarray, Training]:
    """The mask learned from ``scores`` (EAP-IG's means), starting with the circuit asked
    for at one half (a threshold's circuit: DEFAULT_EDGES), and its training; with
    ``--train-each``, the circuits of ``asked`` and each size of the curve trained one
    inside the next. ``metrics``: the clean and the corrupted means."""
    if changes_nothing(*metrics):
        raise UsageError(
            "the corrupted texts leave the metric as the clean ones do (their means are "
            "equal, within float32 rounding): no faithfulness to optimise; give pairs whose "
            "twins change the answer"
        )
    gap = metrics[0] - metrics[1]
    size = DEFAULT_EDGES if options.select is Select.THRESHOLD else int(asked)
    if options.train_each:
        sizes = [int(asked), *(size for size, _ in options.sizes(graph.count))]
        return trained_each(phases, graph, scores, sizes, gap, options)
    learned, training = phases.optimized(
        starting_logits(graph, scores, size), gap, options.training
    )
    return ranked_scores(graph, learned, scores), training


def trained_each(
    phases: Phases,
    graph: Graph,
    scores: np.ndarray,
    sizes: list[int],
    gap: float,
    options: CircuitOptions,
) -> tuple[np.ndarray, Training]:
    """Circuits trained one inside the next (``--train-each``): at each size of ``sizes``
    but none and every edge, smallest first, a mask trained from ``scores``' start with
    the previous circuit's edges held in, each pass keeping exactly that size's edges
    (:func:`attnviz.circuits.optimized.optimized`); its circuit the top of the learned
    mask; the scores in tiers (:func:`tiered_scores`), so that each size's top edges are
    its trained circuit. The trainings' steps and losses one after another."""
    held = np.zeros(graph.edges.shape, dtype=bool)
    trained: list[tuple[np.ndarray, np.ndarray]] = []
    losses: list[float] = []
    each = sorted({size for size in sizes if 0 < size < graph.count})
    for size in each:
        start = starting_logits(graph, scores, size)
        start[held] = np.inf
        learned, training = phases.optimized(start, gap, options.training._replace(sizes=(size,)))
        held = selected(ScoredGraph(graph, learned), Select.TOP, size, False).circuit
        trained.append((held, learned))
        losses += training.losses
    steps = options.training.steps * len(trained)
    return tiered_scores(graph, trained, scores), options.training._replace(
        steps=steps, losses=tuple(losses), sizes=tuple(each)
    )


def node_scores(
    phases: Phases, scored: ScoredGraph, method: CircuitMethod, clean: float, pairs: int
) -> np.ndarray:
    """Each upstream node's score, (U,): exactly (``method`` exact), the metric with the
    node's output carrying its corrupted value into everything that reads it, less the
    clean metric (a pass over the pairs for each node); else the estimate's, the sum of
    the node's edges' (a node's output reaches every input above it through the residual
    stream, so its gradient is the sum of theirs)."""
    graph = scored.graph
    if method is not CircuitMethod.EXACT:
        return np.asarray(scored.scores.sum(axis=1), dtype=np.float64)
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
