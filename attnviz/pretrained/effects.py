"""What a head does to the answer, not only where it looks.

For a causal language model, a text and an answer (the answer's first token after the
text), each head gets two numbers:

- **ablation**: the answer's log-probability with the head's output replaced (by zeros,
  or by its mean over the text's positions), minus the clean log-probability. A head's
  output is its slice of the output projection's input: transformers concatenates the
  heads there, so the slice is exactly what one head writes.
- **dla** (direct logit attribution): the head's output at the last position, through
  its slice of the output projection, through the final norm frozen at the clean final
  residual's scale (TransformerLens's ``apply_ln=True``), dotted with the answer's
  unembedding row: what the head adds to the answer's logit directly.

The ablated forward passes run several heads at once, one per batch row, and start
where the lowest ablated layer does: the layers below it are not run again but hand on
the clean pass's output, which they would compute unchanged.

Shape letters: L layers, H query heads, T tokens, D the model's width, E the output
projection's input (H × head size), B rows of one pass.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Ablation, Site
from attnviz.errors import UsageError, option, warn
from attnviz.pretrained.anatomy import Anatomy, head_size_of
from attnviz.pretrained.finite import check_metric
from attnviz.pretrained.frozen_norms import frozen_norm, through_post_norm
from attnviz.pretrained.metrics import Metric
from attnviz.pretrained.sites import Edit, editing, hooked
from attnviz.progress import LONG_REST, FirstPart, advance

if TYPE_CHECKING:
    import torch


_TOKENS_PER_PASS = 2048  # rows × tokens of one ablated pass: its activations stay small
_ROWS_PER_PASS = 64


@dataclass(frozen=True)
class Measured:
    """The clean run (its metric, the answer's log-probability, what later passes start
    from), and each head's ablation effect and direct logit attribution, (L, H) each."""

    clean: Clean
    ablation: np.ndarray | None  # None: no ablation asked (Ablation.NONE)
    dla: np.ndarray | None  # None: a metric with no direction (not linear in the logits)


def head_effects(
    model: Any,
    body: Anatomy,
    arguments: dict[str, torch.Tensor],
    metric: Metric,
    layers: Sequence[int],
    heads: Sequence[int],
    ablating: Ablating,
    during_clean: contextlib.AbstractContextManager | None = None,
) -> Measured:
    """The clean run of one encoded text, and the ablation effect and direct logit
    attribution of each (layer, head). ``during_clean`` is entered around the clean pass
    alone (a recording of the heads' statistics, which that pass then serves too)."""
    import torch

    with torch.inference_mode(), during_clean or contextlib.nullcontext():
        clean = clean_pass(model, body, arguments, metric)
    dla = attribution(body, clean, metric, layers, heads)
    if ablating.kind is Ablation.NONE:
        return Measured(clean, None, dla)
    with torch.inference_mode():
        ablation = _ablation(model, body, arguments, metric, clean, layers, heads, ablating)
    return Measured(clean, ablation, dla)


def attribution(
    body: Anatomy, clean: Clean, metric: Metric, layers: Sequence[int], heads: Sequence[int]
) -> np.ndarray | None:
    """Each head's direct logit attribution from a clean run's record, (L, H); None for a
    metric with no direction (one not linear in the logits)."""
    import torch

    if not metric.has_direction:
        return None

    with torch.inference_mode():
        return _attribution(body, clean, metric, layers, heads)


@dataclass
class Clean:
    """What the clean pass leaves for the passes that change the model."""

    metric: float
    log_prob: float  # the answer's
    head_inputs: list[torch.Tensor]  # (L) each output projection's input, (1, T, E)
    block_outputs: list[Any]  # (L) each layer's output as it returned it, where recorded
    # (L) at the last position: each attention's output (D,), and its post norm's input
    # and output (D,) where the layer has one
    written: list[Any]
    post_normed: list[tuple[Any, Any] | None]
    residual: torch.Tensor  # (D,) the final norm's input at the last position
    normed: torch.Tensor  # (D,) its output there
    next_log_probs: torch.Tensor  # (vocabulary,) float32 on the CPU: every next token's


def clean_pass(
    model: Any, body: Anatomy, arguments: dict, metric: Metric, run: str = "clean run"
) -> Clean:
    """One run's :class:`Clean` record (``run`` names it where its metric is not finite)."""
    with clean_recording(body) as finish:
        logits = last_logits(model, arguments)
    clean = finish(logits, metric)
    check_metric(clean.metric, model, arguments, run)
    return clean


@contextlib.contextmanager
def clean_recording(
    body: Anatomy, starts: bool = True, head_inputs: bool = True
) -> Iterator[Callable[[torch.Tensor, Metric], Clean]]:
    """While open, a pass records what later passes start from; the function given makes
    the :class:`Clean` record of it from its last logits (every tensor detached, so that a
    pass that asks for gradients hands on none of its graph). What is read at the last
    position is a copy of it: a view would hold the whole (T, D) tensor it was read from,
    each layer's (at 8,000 tokens, half a gigabyte over SmolLM2's 30 layers). Without
    ``starts`` the layers' outputs are left out (``None``): only the exact sweeps start
    from them, and they are as large again; without ``head_inputs``, the heads' inputs to
    the output projections (what direct logit attribution and patching read)."""
    count = len(body.blocks)
    inputs: list[Any] = [None] * count
    block_outputs: list[Any] = [None] * count
    written: list[Any] = [None] * count
    post_normed: list[Any] = [None] * count
    final: list[Any] = [None]

    def keep(into: list, index: int, what: Callable[[tuple, Any], Any]) -> Callable:
        def hook(_module: Any, args: tuple, output: Any = None) -> None:
            into[index] = _detached(what(args, output))

        return hook

    def at_last(args: tuple, output: Any) -> tuple:  # a norm's input and output at the end
        return _last(args[0]), _last(output)

    def finish(logits: torch.Tensor, metric: Metric) -> Clean:
        logits = logits.detach()
        log_probs = logits[0].float().log_softmax(-1).cpu()
        residual, normed = final[0]
        return Clean(
            float(metric.of(logits)[0]),
            float(log_probs[metric.answer_id]),
            inputs,
            block_outputs,
            written,
            post_normed,
            residual,
            normed,
            log_probs,
        )

    with contextlib.ExitStack() as hooks:
        for layer in range(count):
            projection, block = body.projections[layer], body.blocks[layer]
            kept = (  # what each hook registers, keeps where, and whether it is asked
                (projection.register_forward_hook, written, lambda _, out: _last(out), True),
                (projection.register_forward_pre_hook, inputs, lambda a, _: a[0], head_inputs),
                (block.register_forward_hook, block_outputs, lambda _, out: out, starts),
            )
            for register, into, what, asked in kept:
                if asked:
                    hooks.enter_context(hooked(register(keep(into, layer, what))))
            if body.post_norms[layer] is not None:
                hook = keep(post_normed, layer, at_last)
                hooks.enter_context(hooked(body.post_norms[layer].register_forward_hook(hook)))
        hooks.enter_context(hooked(body.norm.register_forward_hook(keep(final, 0, at_last))))
        yield finish


def _last(tensor: torch.Tensor) -> torch.Tensor:
    """(1, T, D) -> (D,): a copy of the last position."""
    return tensor.detach()[0, -1].clone()


def _detached(value: Any) -> Any:
    """A tensor, or a tuple of them (a layer's output), without its graph."""
    if isinstance(value, tuple):
        return type(value)(_detached(part) for part in value)
    return value.detach() if hasattr(value, "detach") else value


def last_logits(model: Any, arguments: dict) -> torch.Tensor:
    """The logits at the last position, (B, vocabulary); only those are computed where the
    model can leave the others out."""
    keep = {"logits_to_keep": 1} if "logits_to_keep" in _parameters(model.forward) else {}
    return model(**arguments, use_cache=False, **keep).logits[:, -1]


def _parameters(function: Callable) -> set[str]:
    return set(inspect.signature(function).parameters)


def _attribution(
    body: Anatomy, clean: Clean, metric: Metric, layers: Sequence[int], heads: Sequence[int]
) -> np.ndarray:
    """Each head's direct logit attribution, (L, H)."""
    import torch

    frozen = frozen_norm(body.norm, clean.residual, clean.normed)
    direction = metric.direction(body.unembedding)  # (D,)
    result = np.zeros((len(layers), len(heads)))
    for row, layer in enumerate(layers):
        projection = body.projections[layer]
        last = clean.head_inputs[layer][0, -1]  # (E,)
        size = body.head_size
        alone = torch.zeros(len(heads) + 1, last.shape[0], dtype=last.dtype, device=last.device)
        for column, head in enumerate(heads):  # row k holds head k's slice, the last none
            alone[column, head * size : (head + 1) * size] = last[head * size : (head + 1) * size]
        written = projection(alone).float()  # (H + 1, D): each head's slice, then the bias
        written = written[:-1] - written[-1]
        if body.post_norms[layer] is not None:
            post_norm = body.post_norms[layer]
            recorded, seen = clean.post_normed[layer], clean.written[layer]
            written = through_post_norm(post_norm, recorded, seen, layer)(written)
        result[row] = (frozen(written) @ direction).cpu().numpy()
    return result


# What one batch row of a pass changes: hooks installed for the rows at these indices of the
# batch (given the batch's size), into the exit stack of that pass.
Install = Callable[[contextlib.ExitStack, list[int], int], None]


@dataclass(frozen=True)
class Change:
    """One change of the model to measure the answer under: from which layer up it differs
    from the clean pass, and the hooks that make it for some rows of a batch."""

    first_layer: int
    install: Install


def _ablation(
    model: Any,
    body: Anatomy,
    arguments: dict,
    metric: Metric,
    clean: Clean,
    layers: Sequence[int],
    heads: Sequence[int],
    ablating: Ablating,
) -> np.ndarray:
    """Each head's ablation effect, (L, H): the answer's log-probability with the head's
    output replaced, less the clean one."""

    def without(layer: int, head: int) -> Install:
        def install(patches: contextlib.ExitStack, rows: list[int], _batch: int) -> None:
            part = head_slice(clean.head_inputs[layer], body.heads, head)
            own = clean.head_inputs[layer][0, :, part]  # (T, Dh)
            value = ablating.replacement(layer, own, lambda inputs: inputs[0, :, part])
            patches.enter_context(editing(body, Site.Z, layer, replacer(rows, part, value)))

        return install

    changes = [Change(layer, without(layer, head)) for layer in layers for head in heads]
    effects = iter(changed_metrics(model, body, arguments, metric, clean, changes, "ablation"))
    return np.array([[next(effects) for _ in heads] for _ in layers])


# What each kind of ablation puts in place of a head's outputs, given them in the run the
# head is ablated in and, where the kind reads it (ABLATION_NEEDS), in the corrupted run:
# (T, Dh) each, or every head's at once, (T, H, Dh).
REPLACEMENTS: dict[Ablation, Callable[[Any, Any], Any]] = {
    Ablation.ZERO: lambda _own, _corrupt: 0.0,
    Ablation.MEAN: lambda own, _corrupt: own.mean(0),  # over the positions: (Dh) or (H, Dh)
}


@dataclass(frozen=True)
class Ablating:
    """A kind of ablation and what it reads: the corrupted run's output projection inputs,
    (L) of (1, T, E), where the kind reads them."""

    kind: Ablation
    corrupt: list[Any] | None = None

    def replacement(self, layer: int, own: torch.Tensor, view: Callable[[Any], Any]) -> Any:
        """What replaces ``own``, a head's outputs (or every head's) in ``layer``; ``view``
        takes a run's output projection input, (1, T, E), to the shape ``own`` has."""
        corrupt = None if self.corrupt is None else view(self.corrupt[layer])
        return REPLACEMENTS[self.kind](own, corrupt)


def changed_metrics(
    model: Any,
    body: Anatomy,
    arguments: dict,
    metric: Metric,
    base: Clean,
    changes: list[Change],
    what: str,
    told: FirstPart | None = None,
) -> list[float]:
    """The metric under each change of the ``base`` run (the clean run, or a corrupted
    one), less the base's. Changes are taken a pass's rows at a time, lowest first, so
    that a pass starts as high in the model as its lowest change, the layers below
    handing on the base run's states. ``what`` the changes measure (``"ablation"``) names
    the sweep to a progress listener, and in the line said before a long one; ``told``
    hears how long the first pass took (by default, :func:`say_if_long` of the sweep)."""
    tokens = int(arguments["input_ids"].shape[1])
    rows = max(1, min(_ROWS_PER_PASS, _TOKENS_PER_PASS // tokens))
    order = sorted(range(len(changes)), key=lambda index: changes[index].first_layer)
    # A pass costs the layers it computes, from its lowest change's on: the first, from
    # the lowest, costs the most of them.
    layers = len(body.blocks)
    costs = [
        len(order[first : first + rows]) * (layers + 1 - changes[order[first]].first_layer)
        for first in range(0, len(order), rows)
    ]
    told = told or partial(say_if_long, what, len(costs), rows)
    effects = [0.0] * len(changes)
    reuse, checked = True, False
    started = time.monotonic()
    for first in range(0, len(order), rows):
        chunk = [changes[index] for index in order[first : first + rows]]
        start = chunk[0].first_layer if reuse else 0
        # The first pass that starts above the clean one checks that it may: one more row,
        # changing nothing, must give the clean log-probability (else every pass runs whole).
        control = start > 0 and not checked
        found = _changed_pass(model, body, arguments, metric, base, chunk, start, control)
        if control:
            checked = True
            tolerance = 1e-4 * max(1.0, abs(base.metric))
            if abs(found[-1] - base.metric) > tolerance:
                reuse = False
                found = _changed_pass(model, body, arguments, metric, base, chunk, 0)
        for index, value in zip(order[first : first + rows], found, strict=False):
            effects[index] = value - base.metric
        advance(what, min(first + rows, len(order)), len(order))
        if first == 0:
            told(time.monotonic() - started, costs[0], sum(costs))
    return effects


def say_if_long(what: str, passes: int, rows: int, first: float, done: int, total: int) -> None:
    """After the first of a sweep's ``passes`` of ``rows`` changes (``first`` seconds for
    ``done`` of the ``total`` work), one line where the rest will take long: how long,
    and what the gradient estimate would cost (a forward and a backward pass of the text,
    about three forward passes of one row; a knockout has no estimate)."""
    left = first * (total - done) / done
    if left < LONG_REST:
        return
    estimate = "" if what == "knockout" else (
        f"; {option('--method', 'gradient')} estimates every {what} from one forward and one "
        "backward pass "
        f"(about {max(1.0, 3 * first / rows):.0f} s)"
    )  # fmt: skip
    warn(f"the exact {what} sweep runs {passes} passes, about {left:.0f} s more{estimate}")


def _changed_pass(
    model: Any,
    body: Anatomy,
    arguments: dict,
    metric: Metric,
    base: Clean,
    chunk: list[Change],
    start: int,
    control: bool = False,
) -> list[float]:
    """The metric under each change of ``chunk``, one per batch row (and a last row
    changing nothing, if ``control``), the layers below ``start`` handing on the base
    pass's output."""
    batch = len(chunk) + int(control)
    expanded = {name: value.expand(batch, *value.shape[1:]) for name, value in arguments.items()}
    with contextlib.ExitStack() as patches:
        if start > 0:
            patches.enter_context(
                _handed_on(body.blocks[:start], base.block_outputs[start - 1], batch)
            )
        for row, change in enumerate(chunk):
            change.install(patches, [row], batch)
        logits = last_logits(model, expanded)
    return metric.of(logits).tolist()


def head_slice(head_input: torch.Tensor, heads: int, head: int) -> slice:
    """Where one head's output lies in its output projection's input, (…, E)."""
    size = head_size_of(head_input.shape[-1], heads)
    return slice(head * size, (head + 1) * size)


def replacer(rows: list[int], part: slice, value: torch.Tensor | float) -> Edit:
    """An edit of z, the output projection's input, replacing one head's slice (``part``)
    in the batch's ``rows`` by ``value``: zeros, the head's mean over the positions (Dh,),
    or its output in another run (T, Dh)."""

    def replace(head_input: torch.Tensor) -> torch.Tensor:  # (B, T, E), a copy
        head_input[rows, :, part] = value
        return head_input

    return replace


@contextlib.contextmanager
def _handed_on(blocks: list[Any], output: Any, batch: int) -> Iterator[None]:
    """While open, ``blocks`` compute nothing: each returns ``output`` (the last of them's
    clean output, batch 1) for every batch row, which is what they would compute, since
    nothing below the ablated layers differs from the clean pass. The model still runs its
    own code between layers (masks, position embeddings), so no family's loop is copied."""
    handed = _expanded(output, batch)

    def hand_on(*_args: Any, **_kwargs: Any) -> Any:
        return handed

    for block in blocks:
        block.forward = hand_on  # an instance attribute: nn.Module calls it in place of forward
    try:
        yield
    finally:
        for block in blocks:
            del block.forward


def _expanded(output: Any, batch: int) -> Any:
    """A layer's output (a tensor, or a tuple of them) repeated for ``batch`` rows."""
    import torch

    if isinstance(output, torch.Tensor):
        return output.expand(batch, *output.shape[1:]).contiguous()
    if isinstance(output, tuple):
        return type(output)(_expanded(part, batch) if part is not None else None for part in output)
    raise UsageError(f"attnviz cannot hand on a layer's output of type {type(output).__name__}")
