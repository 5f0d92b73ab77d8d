"""A request against one input: the one check that the input holds what the request asks
of it (the command line makes it of its first input before a model loads,
:meth:`~attnviz.extractor.Extractor.run` of each input), what its answer is measured by,
the refusal by a model that reads no next token (:func:`no_next_token`), and the built-in
stack's of activations (:func:`no_sites`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnviz.choices import (
    ABLATION_LABELS,
    ABLATION_NEEDS,
    INTERVENTIONS,
    MEASURES,
    Ablation,
    Measure,
)
from attnviz.errors import UsageError
from attnviz.inputs import Input
from attnviz.request import Request
from attnviz.selection import token_positions

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Pair


def check_asked(request: Request, given: Input) -> Input:
    """``given``, once it holds what ``request`` asks of it (else a usage error): a trace
    reads an answer and a corrupted twin; a knockout an answer alone; an ablation what its
    kind reads (:data:`~attnviz.choices.ABLATION_NEEDS`). The one check of a request with
    an input: the command line makes it of its first input before a model loads, and
    :meth:`~attnviz.extractor.Extractor.run` of each input."""
    if given.corrupt is not None and given.answer is None and request.activations is None:
        raise UsageError("--corrupt measures what heads do to an answer: give --answer")
    if request.trace is not None and given.answer is None:
        raise UsageError("trace measures what an answer needs: give --answer")
    if request.trace is not None and given.corrupt is None:
        raise UsageError(
            "trace puts the clean run's activations into a run on a corrupted text: give --corrupt"
        )
    circuit = request.circuit
    if circuit is not None and given.answer is None:
        raise UsageError("circuit measures its edges on an answer: give --answer")
    if circuit is not None and INTERVENTIONS[circuit.ablation].corrupt and given.corrupt is None:
        raise UsageError(
            "circuit carries the corrupted run's values along edges, measured on an answer: "
            "give --answer and --corrupt (or --pairs FILE.jsonl), or --ablation zero"
        )
    if request.lens and (given.versus is not None or given.corrupt is not None):
        raise UsageError(
            "the logit lens reads the answer's log-probability: no --versus, --corrupt"
        )
    if request.knockout is not None and given.answer is None:
        raise UsageError("a knockout reads what heads do to an answer: give the input one")
    if request.knockout is not None and (given.versus is not None or given.corrupt is not None):
        raise UsageError("a knockout reads the answer's log-probability: no --versus, --corrupt")
    measure = measure_of(request, given)
    if isinstance(measure, Measure):
        _check_measure(request, given, measure)
    needs = ABLATION_NEEDS.get(request.ablate) if request.effects else None
    if needs == "corrupt" and given.answer is not None and given.corrupt is None:
        raise UsageError(
            f"--ablation {request.ablate} reads {ABLATION_LABELS[request.ablate]}: give --corrupt"
        )
    return given


def _check_measure(request: Request, given: Input, measure: Measure) -> None:
    """The measure's table (:data:`~attnviz.choices.MEASURES`) against what is given: a
    versus answer where it reads one (none where it reads the answer alone), and a
    method it gives something to (EAP and attribution patching read its gradient at the
    clean run)."""
    measured = MEASURES[measure]
    if measured.versus is True and given.versus is None:
        raise UsageError(f"--metric {measure} reads a second answer: give --versus")
    if measured.versus is False and given.versus is not None:
        raise UsageError(f"--metric {measure} reads the answer alone: no --versus")
    nothing_read = request.ablate is Ablation.NONE and given.corrupt is None
    if request.effects and not measured.direction and nothing_read:
        raise UsageError(
            f"--metric {measure} has no dla (it is not linear in the logits) and --ablate "
            "none leaves the ablation out: give --corrupt (patch) or an ablation"
        )
    circuit = request.circuit
    by_gradient = (circuit.method if circuit is not None else request.method) == "gradient"
    if measured.flat_at_clean and by_gradient:
        instead = "--method ig or exact" if circuit is not None else "--method exact"
        raise UsageError(
            f"--metric {measure} is at its least, 0, at the clean run, so its gradient there "
            f"is 0: --method gradient (attribution patching) estimates nothing from it; give "
            f"{instead}"
        )


def measure_of(request: Request, given: Input) -> Measure | Callable[..., Any]:
    """What the effects on ``given``'s answer are measured by: the request's metric, or by
    default the log-probability (the logit difference where the input has a versus)."""
    if request.metric is not None:
        return request.metric
    return Measure.LOG_PROB if given.versus is None else Measure.LOGIT_DIFFERENCE


def measure_name(measure: object) -> str:
    """How a measure is named in a result and its files: a Measure's word, or a caller's
    function's name."""
    return str(getattr(measure, "value", getattr(measure, "__name__", "metric")))


def pair_of(given: Input, ablation: Ablation) -> Pair:
    """What a circuit keeps of an input it was scored on: its text, answers and (where
    the intervention reads it) its corrupted twin."""
    from attnviz.circuits.circuit import Pair  # numpy

    assert given.answer is not None  # check_asked's, for a circuit
    corrupt = given.corrupt if INTERVENTIONS[ablation].corrupt else None
    return Pair(given.text, given.answer, given.versus, corrupt)


Finder = Callable[[str], list[int]]  # a text -> the positions of the tokens that cover it


def positions_asked(
    request: Request, queries: int, keys: int, find_query: Finder, find_key: Finder
) -> tuple[list[int] | None, list[int] | None]:
    """The query rows (``--rows``) and the keys of the span (``--span``) of one input, as
    positions: given as indices, or as a text that the finders look for."""
    rows = span = None
    if request.rows is not None:
        rows = token_positions(request.rows, queries, "row", "query tokens", find_query)
    if request.span is not None:
        span = token_positions(request.span, keys, "span key", "key tokens", find_key)
    return rows, span


def no_sites(model: str) -> UsageError:
    """The built-in stack's refusal of activations by name: its layers have no sites."""
    return UsageError(
        f"{model} names no sites: activations are read of a pretrained model's layers "
        "(--model smollm2, --model minilm, a folder saved with save_pretrained)"
    )


def no_next_token(model: str, reader: str = "--answer") -> UsageError:
    """The refusal by a model that predicts no next token of what reads one: ``reader``
    names what was asked (``--answer``, ``the lens``)."""
    return UsageError(
        f"{model} has no next token to read: {reader} needs a causal language model "
        "(--model smollm2, a GPT-2 or Llama folder); the built-in stack has no unembedding"
    )
