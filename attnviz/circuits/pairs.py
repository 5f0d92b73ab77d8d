"""A circuit's pairs as given and checked: one text with its answer and corrupted twin or
a dataset of them (:func:`pairs_given`), a circuit file's own pairs where none are given
(:func:`pairs_of_scores`), each pair checked before any pass (:func:`check_pairs`), and
an error about one pair named as the pairs were given (:func:`pair_error`). What the
extractors and the Ray workers share."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from attnviz.asked import check_asked, measure_name, measure_of, pair_of
from attnviz.choices import INTERVENTIONS
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.spans import pair_spans, span_names
from attnviz.errors import UsageError
from attnviz.inputs import Input
from attnviz.request import Request

UNALIKE = "every pair is measured alike: give each a versus answer, or none"


def pairs_given(
    text: str | None,
    answer: str | None,
    corrupt: str | None,
    versus: str | None,
    pairs: Iterable[Input | Mapping[str, str]] | None,
) -> list[Input]:
    """:meth:`~attnviz.extractor.Extractor.circuit`'s pairs: one text with its answer, versus and
    corrupted twin, or ``pairs`` that hold each their own."""
    if (text is None) == (pairs is None):
        raise UsageError("give a text (with its answer and corrupted twin) or pairs, not both")
    if pairs is None:
        assert text is not None
        return [Input(text, answer=answer, versus=versus, corrupt=corrupt)]
    if answer is not None or corrupt is not None or versus is not None:
        raise UsageError("each pair holds its answer, versus and corrupted text")
    return [each if isinstance(each, Input) else _pair(each) for each in pairs]


def _pair(given: Mapping) -> Input:
    """A pair given as a mapping, its own spans (``"spans"``) read as a pairs file's."""
    spans = given.get("spans")
    return Input(**{**given, "spans": None if spans is None else pair_spans(spans)})


def own_spans_asked(options: CircuitOptions, inputs: list[Input] | None) -> CircuitOptions:
    """The options splitting scores by the pairs' own spans, every one of the first
    pair's by name, where the pairs name spans and the options ask none."""
    own = inputs[0].spans if inputs else None
    if own is None or options.positioned:
        return options
    return replace(options, spans=tuple(name for name, _ in own))


def pairs_of_scores(options: CircuitOptions) -> list[Input]:
    """The pairs a circuit file (``--scores``) was scored on, where no others are given."""
    from attnviz.circuits.circuit import Circuit  # numpy

    given = options.given
    if not isinstance(given, Circuit) or not given.inputs:
        raise UsageError(
            f"--scores {options.scores} keeps no pairs of its own: give the TEXT (with "
            "--answer and --corrupt) or --pairs FILE.jsonl it was scored on"
        )
    return [Input(pair.text, answer=pair.answer, versus=pair.versus, corrupt=pair.corrupt)
            for pair in given.inputs]  # fmt: skip


def check_pairs(inputs: list[Input], request: Request, names: list[str] | None) -> Request:
    """A circuit request's pairs, each checked (named by ``names`` in an error): each with
    its answer and corrupted twin, and every one with a versus answer or none. The request
    as the pairs ask it: split by their own spans where they name some and it none."""
    if request.circuit is None:
        raise UsageError("the request asks no circuit: give it circuit=CircuitOptions(...)")
    if not inputs:
        raise UsageError("no pairs: a circuit is measured on at least one")
    for index, each in enumerate(inputs):
        try:
            check_asked(request, each)
        except UsageError as error:
            raise UsageError(pair_error(error, index, len(inputs), names)) from None
    for index, each in enumerate(inputs):
        if (each.versus is None) != (inputs[0].versus is None):
            alike = UsageError(UNALIKE)
            raise UsageError(pair_error(alike, index, len(inputs), names))
    _check_own_spans(inputs, request.circuit, names)
    asked = replace(request, circuit=own_spans_asked(request.circuit, inputs))
    _check_given(inputs, asked)
    return asked


def _check_own_spans(inputs: list[Input], options: CircuitOptions, names: list[str] | None) -> None:
    """Pairs that name their own spans: every one, the same names (one schema), read by
    the spans asked."""
    if all(each.spans is None for each in inputs):
        return
    if options.by_position:
        raise UsageError(
            'the pairs name their own "spans": --by-position would not read them; give --spans '
            "with their names, or leave it out"
        )
    first = next(each.spans for each in inputs if each.spans is not None)
    for index, each in enumerate(inputs):
        if each.spans is None or {n for n, _ in each.spans} != {n for n, _ in first}:
            held = "none" if each.spans is None else ", ".join(n for n, _ in each.spans)
            unlike = UsageError(
                f'its "spans" ({held}) are not the others\' ({", ".join(n for n, _ in first)}): '
                "give every pair the same named spans"
            )
            raise UsageError(pair_error(unlike, index, len(inputs), names))


def _check_given(inputs: list[Input], request: Request) -> None:
    """A circuit file's scores (``--scores``) taken only for the pairs, answers, metric
    and intervention they were scored on."""
    from attnviz.circuits.circuit import Circuit, scored_elsewhere  # numpy

    options = request.circuit
    assert options is not None  # check_pairs'
    _check_given_spans(options)
    if not isinstance(options.given, Circuit):  # EAP-IG's graph file keeps neither
        return
    metric = measure_name(measure_of(request, inputs[0]))
    pairs = [pair_of(given, options.ablation) for given in inputs]
    why = scored_elsewhere(options.given, pairs, metric, options.ablation)
    if why is not None:
        raise UsageError(
            f"--scores {options.scores} {why}: give what it was scored on, or leave out TEXT "
            "and --pairs to take its own pairs"
        )


def _check_given_spans(options: CircuitOptions) -> None:
    """A circuit file's scores split by the spans asked, or not split where none are."""
    from attnviz.circuits.circuit import Circuit  # numpy

    given = options.given
    if given is None:
        return
    held = given.scored.spans if isinstance(given, Circuit) else ()
    asked = span_names(options.spans) if options.spans else ()
    if held == asked:
        return
    if not held:
        raise UsageError(
            f"--scores {options.scores} holds each edge's score over every position: it "
            "cannot be split by --spans; score the pairs again with them"
        )
    instead = f", not {', '.join(asked)}" if asked else ""
    raise UsageError(
        f"--scores {options.scores} is split by the spans {', '.join(held)}: give the "
        f"--spans it was scored with{instead}"
    )


def pair_error(error: Exception, index: int, count: int, names: list[str] | None) -> str:
    """What went wrong with one of ``count`` pairs, named as given ("pair 1"… by default;
    a single pair given without a name is not named)."""
    if names is None and count == 1:
        return str(error)
    return f"{names[index] if names else f'pair {index + 1}'}: {error}"


def as_passes_read(inputs: list[Input], options: CircuitOptions) -> list[Input]:
    """The pairs as a circuit's passes read them: each with the corrupted text its
    intervention's row gives it (its own to patch from; none to ablate)."""
    twins = INTERVENTIONS[options.ablation].twins([each.corrupt for each in inputs])
    return [replace(each, corrupt=twin) for each, twin in zip(inputs, twins, strict=True)]
