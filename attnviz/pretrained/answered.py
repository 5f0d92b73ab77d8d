"""A text read for what heads do to its answer: each head's effects (ablation, direct
logit attribution, patching from a corrupted twin), a knockout of layers, or a trace of
layers × positions; exactly, or by attribution patching's gradient estimate."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attnviz.analysis.effects import Answer, HeadEffects, Knockout
from attnviz.analysis.lens import Lens
from attnviz.analysis.trace import Trace
from attnviz.asked import measure_name, measure_of
from attnviz.choices import ABLATION_NEEDS, Ablation, Method, Site
from attnviz.errors import UsageError, warn
from attnviz.inputs import Input
from attnviz.pretrained.anatomy import Anatomy, anatomy_of
from attnviz.pretrained.effects import (
    Ablating,
    Clean,
    attribution,
    clean_pass,
    head_effects,
    last_logits,
)
from attnviz.pretrained.encoding import ModelInputs, Side, forward, on_device
from attnviz.pretrained.finite import CORRUPTED_RUN, check_effects
from attnviz.pretrained.knockout import knockout, windows
from attnviz.pretrained.labels import piece_labels
from attnviz.pretrained.lens import logit_lens
from attnviz.pretrained.metrics import Metric
from attnviz.pretrained.patching import (
    Twins,
    ablation_estimate,
    estimated_trace,
    gradients,
    head_patch,
    patch_estimate,
    trace,
)
from attnviz.request import PREDICTIONS, Request
from attnviz.selection import resolve, token_positions

if TYPE_CHECKING:
    from attnviz.choices import Mode
    from attnviz.pretrained.loading import PretrainedModel
    from attnviz.pretrained.reader import ModelReader


def answer_token(loaded: PretrainedModel, side: Side, answer: str) -> int:
    """The id of the answer's first token after the text, as the tokenizer splits the text
    and the answer together (a sentencepiece space belongs to the answer's first word)."""
    if side.cut:
        raise UsageError("the text was cut to the model's length: there is no answer after it")
    tokenizer = loaded.tokenizer
    alone = tokenizer(side.text, add_special_tokens=False)["input_ids"]
    joined = tokenizer(side.text + answer, add_special_tokens=False)["input_ids"]
    if not tokenizer(answer, add_special_tokens=False)["input_ids"] or joined == alone:
        raise UsageError(
            f"the answer {answer!r} tokenizes to nothing: {loaded.name}'s tokenizer drops every "
            "character of it"
        )
    if len(joined) <= len(alone) or joined[: len(alone)] != alone:
        raise UsageError(
            f"the answer {answer!r} does not begin a token of its own after the text: its "
            "first characters join the text's last token (begin it with a space?)"
        )
    answer_id = int(joined[len(alone)])
    if not tokenizer.decode([answer_id]).strip():
        piece, first = answer_label(loaded, answer_id), answer.strip()[0]
        warn(
            f"the answer {answer!r} is read at its first token, {piece!r}, which holds a space "
            f"and none of its characters: to read {first!r}, end the text with the space and "
            "begin the answer without it"
        )
    return answer_id


def answer_label(loaded: PretrainedModel, answer_id: int) -> str:
    """The answer's first token as a table and a file say it: the tokenizer's decoding of
    it (a bare space a space, not a byte-level vocabulary's Ġ); a sentencepiece word
    marker, which decodes alone to nothing, the space it stands for."""
    decoded = loaded.tokenizer.decode([answer_id])
    if decoded:
        return decoded
    piece = str(loaded.tokenizer.convert_ids_to_tokens(answer_id))
    return " " * len(piece) if not piece.strip("▁") else piece


_TWIN_WITHIN = 10  # an answer this far down whose twin with a space is within: a warning


def next_tokens(loaded: PretrainedModel, asked: Answered, log_probs: Any) -> dict[str, Any]:
    """The answer's rank among the next tokens and the model's likeliest next tokens, from
    the clean run's (vocabulary,) log-probabilities; an answer the model hardly expects
    whose twin with a space first it does expect is said in one line (" Paris", not
    "Paris", is the next word of most tokenizers)."""
    import torch

    def rank_of(token: int) -> int:
        return int((log_probs > log_probs[token]).sum()) + 1

    rank = rank_of(asked.metric.answer_id)
    best = torch.topk(log_probs, min(PREDICTIONS, len(log_probs)))
    predictions = tuple(
        (answer_label(loaded, int(token)), float(value.exp()))
        for value, token in zip(best.values, best.indices, strict=True)
    )
    given = asked.given.answer
    if rank > _TWIN_WITHIN and given is not None and not given[:1].isspace():
        twin = " " + given
        try:
            twin_rank = rank_of(answer_token(loaded, asked.side, twin))
        except UsageError:  # no token of its own after the text: no twin
            twin_rank = None
        if twin_rank is not None and twin_rank <= _TWIN_WITHIN:
            warn(
                f"the answer {given!r} is the model's next token number {rank:,} (probability "
                f"{float(log_probs[asked.metric.answer_id].exp()):.2g}); {twin!r}, with a space "
                f"first, is number {twin_rank}: did you mean --answer {twin!r}?"
            )
    return {"rank": rank, "predictions": predictions}


@dataclass(frozen=True)
class Answered:
    """A text and its answer, encoded for the passes that measure heads' effects on it."""

    given: Input
    token: str  # the answer's first token, as the tokenizer spells it
    metric: Metric
    versus_token: str | None
    body: Anatomy
    layers: list[int]
    side: Side
    arguments: dict[str, Any]  # the forward pass's, on the model's device
    mode: Mode  # what the text is read in, its attention modules and its encoding:
    modules: list  # the heads' statistics are read in the clean pass
    inputs: ModelInputs
    corrupt: Side | None = None  # the corrupted twin, as many tokens
    corrupt_arguments: dict[str, Any] | None = None

    def answer(self, **measured: Any) -> Answer:
        """What the effects were measured on, with the runs' metrics given."""
        given = self.given
        assert given.answer is not None
        return Answer(
            given.answer,
            self.token,
            versus=given.versus,
            versus_token=self.versus_token,
            corrupt=given.corrupt,
            measure=measure_name(self.metric.measure),
            text=given.text,
            **measured,
        )


CORRUPTED = "corrupted text"  # what messages call --corrupt's text


def answered(extractor: ModelReader, given: Input, request: Request) -> Answered:
    """One text encoded for the effects on its answer (and its corrupted twin, of as many
    tokens): a model without an answer to read is refused before anything is encoded."""
    loaded = extractor.loaded
    assert given.answer is not None  # asked of inputs with an answer
    if given.target is not None or given.pair is not None:
        raise UsageError("effects on an answer read one text: no target, no sentence pair")
    body = anatomy_of(loaded, request.next_token_reader)
    mode, modules, layers, inputs = extractor.prepared([given], request)
    side = inputs.keys[0]
    answer_id = answer_token(loaded, side, given.answer)
    versus_id = None if given.versus is None else answer_token(loaded, side, given.versus)
    if versus_id == answer_id:
        raise UsageError(
            f"--versus {given.versus!r} begins with the answer's token "
            f"{answer_label(loaded, answer_id)!r}: their logit difference is 0"
        )
    corrupt = corrupt_arguments = None
    if given.corrupt is not None:
        corrupt, corrupt_arguments = corrupted_twin(extractor, request, side, given.corrupt)
    arguments = on_device(loaded, inputs.arguments)
    metric = Metric(answer_id, versus_id, measure_of(request, given))
    if metric.reads_clean:  # the clean run's next-token distribution, read once
        import torch

        with forward(loaded), torch.inference_mode():
            clean = last_logits(loaded.model, arguments)[0].float()
        metric = replace(metric, clean=clean)
    return Answered(
        given=given,
        token=answer_label(loaded, answer_id),
        metric=metric,
        versus_token=None if versus_id is None else answer_label(loaded, versus_id),
        body=body,
        layers=layers,
        side=side,
        arguments=arguments,
        mode=mode,
        modules=modules,
        inputs=inputs,
        corrupt=corrupt,
        corrupt_arguments=corrupt_arguments,
    )


def corrupted_twin(
    extractor: ModelReader, request: Request, side: Side, corrupt: str
) -> tuple[Side, dict[str, Any]]:
    """The corrupted twin of a text read as ``side``, and its forward pass's arguments on
    the model's device: refused unless it has as many tokens."""
    *_, corrupt_inputs = extractor.prepared([Input(corrupt)], request, CORRUPTED)
    twin = corrupt_inputs.keys[0]
    if twin.length != side.length:
        raise UsageError(
            f"the {CORRUPTED} is {twin.given_length} tokens and the text {side.given_length}: "
            "patching puts each position's activation into the same position, so the "
            "two must have as many tokens"
        )
    return twin, on_device(extractor.loaded, corrupt_inputs.arguments)


def effects_of(
    extractor: ModelReader,
    asked: Answered,
    request: Request,
    during_clean: contextlib.AbstractContextManager | None = None,
) -> HeadEffects:
    """Each chosen head's ablation effect and direct logit attribution, and its patching
    effect where the text has a corrupted twin."""
    model, body, metric = extractor.loaded.model, asked.body, asked.metric
    heads = resolve(request.heads, body.heads, "head")
    layers = asked.layers
    patch = corrupt_metric = None
    with forward(extractor.loaded):
        ablating = _ablating(model, asked, request.ablate)
        if request.method is Method.EXACT:
            measured = head_effects(
                model, body, asked.arguments, metric, layers, heads, ablating, during_clean
            )
            clean, ablation, dla = measured.clean, measured.ablation, measured.dla
            if asked.corrupt_arguments is not None:
                corrupt_metric, patch = head_patch(
                    model, body, asked.corrupt_arguments, metric, clean, layers, heads
                )
        else:
            clean, ablation = _estimated_ablation(model, asked, ablating, layers, during_clean)
            ablation = None if ablation is None else ablation[:, heads]
            dla = attribution(body, clean, metric, layers, heads)
            if asked.corrupt_arguments is not None:
                estimate = patch_estimate(body, clean.head_inputs)
                corrupted = asked.corrupt_arguments
                at_corrupt = gradients(
                    model, body, corrupted, metric, Site.Z, estimate, run=CORRUPTED_RUN
                )
                patch = at_corrupt.of(layers)[:, heads]
                corrupt_metric = at_corrupt.metric
    for name, values in (("ablation", ablation), ("dla", dla), ("patch", patch)):
        if values is not None:
            check_effects(values, name, ("layer", layers), ("head", heads))
    on = asked.answer(
        log_prob=clean.log_prob,
        clean_metric=clean.metric,
        corrupt_metric=corrupt_metric,
        method=request.method,
        **next_tokens(extractor.loaded, asked, clean.next_log_probs),
    )
    return HeadEffects(on, request.ablate, layers, heads, ablation, dla, patch)


def _estimated_ablation(
    model: Any,
    asked: Answered,
    ablating: Ablating,
    layers: list[int],
    during_clean: contextlib.AbstractContextManager | None,
) -> tuple[Clean, Any]:
    """The clean run's record and every head's ablation estimate, (L, H), from one forward
    and one backward pass; without an ablation (Ablation.NONE), the record of a forward
    pass alone and None."""
    import torch

    body, metric = asked.body, asked.metric
    if ablating.kind is Ablation.NONE:
        with torch.inference_mode(), during_clean or contextlib.nullcontext():
            return clean_pass(model, body, asked.arguments, metric), None
    estimate = ablation_estimate(body, ablating)
    at_clean = gradients(model, body, asked.arguments, metric, Site.Z, estimate, True, during_clean)
    assert at_clean.clean is not None
    return at_clean.clean, at_clean.of(layers)


def _ablating(model: Any, asked: Answered, kind: Ablation) -> Ablating:
    """``kind`` of ablation with what it reads: the corrupted run's head outputs, where it
    reads them (checked given by check_asked)."""
    import torch

    if ABLATION_NEEDS.get(kind) != "corrupt":
        return Ablating(kind)
    assert asked.corrupt_arguments is not None
    with torch.inference_mode():
        record = clean_pass(model, asked.body, asked.corrupt_arguments, asked.metric, CORRUPTED_RUN)
    return Ablating(kind, record.head_inputs)


def knocked_out(extractor: ModelReader, given: Input, request: Request) -> Knockout:
    """The answer's log-probability change with the request's knockout in each window."""
    assert request.knockout is not None and given.answer is not None  # check_asked's
    asked = answered(extractor, given, request)
    rows, span = request.knockout
    side = asked.side
    find = side.finder("--knockout")
    queries = token_positions(rows, side.length, "row", "query tokens", find)
    keys = token_positions(span, side.length, "span key", "key tokens", find)
    spans = windows(asked.layers, request.window, len(asked.body.blocks))
    with forward(extractor.loaded):
        log_prob, change = knockout(
            extractor.loaded.model, asked.body, asked.arguments, asked.metric, queries, keys, spans
        )
    return Knockout(
        given.answer,
        asked.token,
        log_prob,
        queries,
        keys,
        request.window,
        asked.layers,
        spans,
        change,
    )


def traced(extractor: ModelReader, given: Input, request: Request) -> Trace:
    """Each cell's patching effect at the request's site: layer × position, or layer ×
    head (× position)."""
    assert request.trace is not None  # its input checked by check_asked
    asked = answered(extractor, given, request)
    assert asked.corrupt is not None and asked.corrupt_arguments is not None
    loaded, site = extractor.loaded, request.trace
    with forward(loaded):
        run = trace if request.method is Method.EXACT else estimated_trace
        twins = Twins(
            loaded.model, asked.body, asked.arguments, asked.corrupt_arguments, asked.metric
        )
        found = run(twins, site, asked.layers, request.by_position)
    on = asked.answer(
        log_prob=found.log_prob,
        clean_metric=found.clean_metric,
        corrupt_metric=found.corrupt_metric,
        method=request.method,
    )
    result = Trace(
        extractor.name,
        on,
        site,
        piece_labels(loaded, asked.side, request.raw_pieces).text,
        piece_labels(loaded, asked.corrupt, request.raw_pieces).text,
        asked.layers,
        found.effect,
        request.by_position,
    )
    numbers = {"layer": asked.layers, "position": range(asked.side.length)}
    axes = [
        (axis, numbers.get(axis, range(size)))
        for axis, size in zip(result.axes, found.effect.shape, strict=True)
    ]
    check_effects(found.effect, "effect", *axes)
    return result


def lensed(extractor: ModelReader, given: Input, request: Request) -> Lens:
    """The logit lens of one text: each chosen layer × position's likeliest next token,
    its probability, and the answer's log-probability where the input has one."""
    loaded = extractor.loaded
    if given.target is not None or given.pair is not None:
        raise UsageError("the logit lens reads one text: no target, no sentence pair")
    body = anatomy_of(loaded, request.next_token_reader)
    _, _, layers, inputs = extractor.prepared([given], request)
    side = inputs.keys[0]
    answer_id = None if given.answer is None else answer_token(loaded, side, given.answer)
    with forward(loaded):
        top_ids, probability, answer = logit_lens(
            loaded.model, body, on_device(loaded, inputs.arguments), answer_id
        )
    top_ids, probability = top_ids[layers], probability[layers]
    return Lens(
        extractor.name,
        piece_labels(loaded, side, request.raw_pieces).text,
        layers,
        # the tokenizer's own decoding (a space, not a byte-level vocabulary's Ġ), which
        # the table and the picture show with its spaces visible
        [[loaded.tokenizer.decode([int(token)]) for token in row] for row in top_ids],
        top_ids,
        probability,
        None if answer_id is None else answer_label(loaded, answer_id),
        None if answer is None else answer[layers],
    )
