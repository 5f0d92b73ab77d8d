"""A circuit found over one text and its corrupted twin, or a dataset of such pairs: every
edge scored on each pair (:mod:`attnviz.pretrained.edges`) and the scores' mean, the
top edges of an estimate computed again exactly where asked (``refine``), then the
faithfulness of the circuits asked for, each pair measured with the same circuit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.circuit import Circuit, faithfulness_of, kept_masks, ranked
from attnviz.choices import CircuitMethod
from attnviz.errors import UsageError, warn
from attnviz.extractor import pair_error
from attnviz.pretrained.answered import Answered, answer_label, answered
from attnviz.pretrained.edges import (
    Runs,
    circuit_metrics,
    estimated_scores,
    exact_scores,
    read_twins,
)
from attnviz.pretrained.encoding import forward

if TYPE_CHECKING:
    from attnviz.pretrained.effects import Anatomy
    from attnviz.pretrained.extractor import PretrainedExtractor
    from attnviz.request import Input, Request

_PROMOTED = 1  # tokens a node's label names


def circuited(
    extractor: PretrainedExtractor,
    inputs: Sequence[Input],
    request: Request,
    names: Sequence[str] | None = None,
) -> Circuit:
    """The circuit of ``inputs`` (each a text, its answer and its corrupted twin; a
    usage error names the input by ``names``, "pair 1"… by default)."""
    names = list(names) if names is not None else None
    options = request.circuit
    assert options is not None and inputs  # asked of a circuit request, with inputs
    kept_runs: dict[int, tuple[Answered, Runs]] = {}

    def runs_of(index: int) -> tuple[Answered, Runs]:
        """A pair's runs: kept for a single pair, read again for each pass over a dataset
        (each pair's records are as large as its text × every node)."""
        if index in kept_runs:
            return kept_runs[index]
        try:
            asked = answered(extractor, inputs[index], request)
            body = asked.body
            assert asked.corrupt_arguments is not None  # check_asked's
            runs = read_twins(
                extractor.loaded.model, body, asked.arguments, asked.corrupt_arguments, asked.metric
            )
        except UsageError as error:
            raise UsageError(pair_error(error, index, len(inputs), names)) from None
        if len(inputs) == 1:
            kept_runs[index] = asked, runs
        return asked, runs

    with forward(extractor.loaded):
        first, first_runs = runs_of(0)
        graph = first_runs.wiring.graph
        kept, sizes = options.kept(graph.count), options.sizes(graph.count)
        scores, clean, corrupt, last = _mean_scores(
            len(inputs), runs_of, options.method, options.steps
        )
        exact = None
        if options.refine is not None:
            scores, exact = _refined(len(inputs), runs_of, scores, options.refine)
        masks = kept_masks(graph, scores, [kept, *sizes])
        measured = np.mean(
            [circuit_metrics(runs_of(index)[1], masks) for index in range(len(inputs))], axis=0
        )
        promoted = _promoted(extractor, first.body, last)
    faithful = [faithfulness_of(float(value), clean, corrupt) for value in measured]
    if faithful[0] is None:
        warn("the corrupted text changes nothing of the metric: faithfulness is not defined")
    return Circuit(
        extractor.name,
        graph,
        scores,
        options.method,
        options.steps,
        len(inputs),
        first.answer(
            log_prob=first_runs.clean.log_prob, clean_metric=clean, corrupt_metric=corrupt
        ),
        kept,
        faithful[0],
        tuple(zip(sizes, faithful[1:], strict=True)),
        exact,
        promoted,
    )


RunsOf = Callable[[int], "tuple[Answered, Runs]"]


def _mean_scores(
    count: int, runs_of: RunsOf, method: CircuitMethod, steps: int | None
) -> tuple[np.ndarray, float, float, Any]:
    """Every edge's score, the mean over the pairs; the mean clean and corrupted
    metrics, and every upstream node's mean clean output at the last position, (U, D)."""
    total, clean, corrupt, last = None, 0.0, 0.0, None
    for index in range(count):
        _, runs = runs_of(index)
        if method is CircuitMethod.EXACT:
            graph = runs.wiring.graph
            upstream, downstream = graph.edge_list()
            scores = np.zeros(graph.edges.shape)
            scores[upstream, downstream] = exact_scores(
                runs, list(zip(upstream, downstream, strict=True))
            )
        else:
            scores = estimated_scores(runs, steps)
        total = scores if total is None else total + scores
        clean += runs.clean.metric
        corrupt += runs.corrupt_metric
        written = runs.clean_written[0, -1].float()  # (U, D)
        last = written if last is None else last + written
    assert total is not None and last is not None  # at least one pair
    return total / count, clean / count, corrupt / count, last / count


def _refined(
    count: int, runs_of: RunsOf, scores: np.ndarray, refine: int
) -> tuple[np.ndarray, np.ndarray]:
    """The scores with the ``refine`` edges of largest estimated |score| computed exactly
    (the mean over the pairs), and where they are."""
    graph = runs_of(0)[1].wiring.graph
    upstream, downstream = ranked(graph, scores)
    chosen = list(zip(upstream[:refine], downstream[:refine], strict=True))
    exact = np.mean([exact_scores(runs_of(index)[1], chosen) for index in range(count)], axis=0)
    refined, where = scores.copy(), np.zeros(graph.edges.shape, dtype=bool)
    for (u, d), value in zip(chosen, exact, strict=True):
        refined[u, d], where[u, d] = value, True
    return refined, where


def _promoted(extractor: PretrainedExtractor, body: Anatomy, last: Any) -> tuple[str, ...]:
    """Each upstream node's token promoted most: its mean output at the last position,
    (U, D), read through the unembedding."""
    import torch

    with torch.inference_mode():
        logits = last @ body.unembedding.weight.float().T  # (U, V)
        best = torch.topk(logits, _PROMOTED, dim=-1).indices[:, 0]
    return tuple(answer_label(extractor.loaded, int(token)) for token in best)
