"""Patching between a clean text and its corrupted twin: how much of the answer comes
back when the clean run's activation is put into the corrupted run.

- **patch** (a head): the metric with the head's clean output restored at every position
  of the corrupted run, less the corrupted run's metric. A head's output is its slice of
  the output projection's input, as for ablation.
- **trace** (a layer × a position, at a site; a layer × a head, at a head's site, at every
  position or at one): the metric with the clean activation restored there, less the
  corrupted run's. The sites and where each lies: :mod:`attnviz.pretrained.sites`.

Exactly (a forward pass per change, batched, each starting at its layer from the
corrupted run's states: :func:`~attnviz.pretrained.effects.changed_metrics`), or by
attribution patching (Nanda 2023; Kramár et al. 2024): the first-order estimate
∂metric/∂a · Δa from one backward pass through the model's own attention. For an
ablation Δa is the ablated output less the clean one, read at the clean run; for patch
and trace the clean activation less the corrupted one, read at the corrupted run.

Shape letters: L layers, H heads, T tokens, D the model's width, E the output
projection's input (H × head size).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Site
from attnviz.errors import UsageError
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.backward_pass import (
    backward_to,
    recomputed_when_long,
    weights_without_gradients,
)
from attnviz.pretrained.effects import (
    Ablating,
    Change,
    Clean,
    Install,
    changed_metrics,
    clean_pass,
    clean_recording,
    head_slice,
    last_logits,
)
from attnviz.pretrained.finite import CORRUPTED_RUN, check_metric
from attnviz.pretrained.metrics import Metric
from attnviz.pretrained.sites import (
    SITES,
    Found,
    Units,
    hooked,
    reading,
    recorded,
    restoring,
    site_width,
    units_of,
)
from attnviz.pretrained.windowed import windowed
from attnviz.progress import advance

if TYPE_CHECKING:
    import torch


def head_patch(
    model: Any,
    body: Anatomy,
    corrupt_arguments: dict,
    metric: Metric,
    clean: Clean,
    layers: Sequence[int],
    heads: Sequence[int],
) -> tuple[float, np.ndarray]:
    """The corrupted run's metric, and each head's patching effect, (L, H)."""
    import torch

    def restored(layer: int, head: int) -> Install:
        def install(patches: contextlib.ExitStack, rows: list[int], _batch: int) -> None:
            # a head's output at every position: the trace's z site, found where it is
            part = head_slice(clean.head_inputs[layer], body.heads, head)
            where = (slice(None), part)
            patches.enter_context(
                restoring(body, Site.Z, layer, rows, where, clean.head_inputs[layer])
            )

        return install

    with torch.inference_mode():
        corrupt = clean_pass(model, body, corrupt_arguments, metric, CORRUPTED_RUN)
        changes = [Change(layer, restored(layer, head)) for layer in layers for head in heads]
        effects = iter(
            changed_metrics(model, body, corrupt_arguments, metric, corrupt, changes, "patch")
        )
    return corrupt.metric, np.array([[next(effects) for _ in heads] for _ in layers])


@dataclass(frozen=True)
class Traced:
    """Both runs' metrics, the answer's clean log-probability, and each layer × position's
    effect, (L, T)."""

    clean_metric: float
    corrupt_metric: float
    log_prob: float
    effect: np.ndarray


@dataclass(frozen=True)
class Twins:
    """A text and its corrupted twin (as many tokens), each as the model's forward
    arguments, and the metric both runs are measured by."""

    model: Any
    body: Anatomy
    clean_arguments: dict
    corrupt_arguments: dict
    metric: Metric


def trace(twins: Twins, site: Site, layers: Sequence[int], by_position: bool = False) -> Traced:
    """Each of ``layers`` × each cell's exact patching effect at ``site``: a position's
    for a layer's site, a head's (at every position, or ``by_position``) for a head's."""
    import torch

    model, body, metric = twins.model, twins.body, twins.metric
    clean_arguments, corrupt_arguments = twins.clean_arguments, twins.corrupt_arguments
    with torch.inference_mode():
        with recorded(model, body, site) as activations:
            clean = clean_pass(model, body, clean_arguments, metric)
        corrupt = clean_pass(model, body, corrupt_arguments, metric, CORRUPTED_RUN)
        tokens, width = site_width(body, site, activations[0])
        shape, where = cells(units_of(body, site, 0, width), site, tokens, by_position)

        def restored(layer: int, unit: int | None, position: int | None) -> Install:
            def install(patches: contextlib.ExitStack, rows: list[int], _batch: int) -> None:
                columns = units_of(body, site, layer, width).of(unit)
                positions = slice(None) if position is None else position
                patches.enter_context(
                    restoring(body, site, layer, rows, (positions, columns), activations[layer])
                )

            return install

        changes = [
            Change(layer, restored(layer, unit, position))
            for layer in layers
            for unit, position in where
        ]
        effects = changed_metrics(
            model, body, corrupt_arguments, metric, corrupt, changes, "trace cell"
        )
    effect = np.array(effects).reshape(len(layers), *shape)
    return Traced(clean.metric, corrupt.metric, clean.log_prob, effect)


def cells(
    units: Units, site: Site, tokens: int, by_position: bool
) -> tuple[tuple[int, ...], list[tuple[int | None, int | None]]]:
    """A layer's cells at ``site``: their shape, (T), (U) or (U, T), and each one's (unit,
    position), None for all of them."""
    if not site.of_heads:
        return (tokens,), [(None, position) for position in range(tokens)]
    if not by_position:
        return (units.count,), [(unit, None) for unit in range(units.count)]
    return (units.count, tokens), [
        (unit, position) for unit in range(units.count) for position in range(tokens)
    ]


# Attribution patching: the gradient estimates.


# What a backward pass reads of one layer: (layer, its activation at the site, the
# metric's gradient with respect to it), each (1, T, ·), to a small tensor on the model's
# device. Each gradient is read as the backward pass computes it and dropped: no pass holds
# every layer's. Nothing is copied to the CPU until the pass is over: a copy in the middle
# would make the CPU wait for the device at every layer.
Reduce = Callable[[int, "torch.Tensor", "torch.Tensor"], "torch.Tensor"]


@dataclass(frozen=True)
class Gradients:
    """One run's metric and what a :data:`Reduce` made of each layer's activation and
    gradient."""

    metric: float
    reduced: list[torch.Tensor]
    clean: Clean | None = None  # the run's record, where asked for (a clean run's)

    def of(self, layers: Sequence[int]) -> np.ndarray:
        """What was read of ``layers``, stacked: (L, ·), copied to the CPU at once."""
        import torch

        stacked = torch.stack([self.reduced[layer] for layer in layers])
        return stacked.cpu().numpy().astype(np.float64)


def gradients(
    model: Any,
    body: Anatomy,
    arguments: dict,
    metric: Metric,
    site: Site,
    reduce: Reduce,
    record: bool = False,
    during: contextlib.AbstractContextManager | None = None,
    run: str = "clean run",
) -> Gradients:
    """One forward and one backward pass: ``reduce`` of each layer's activation at
    ``site`` (:data:`~attnviz.pretrained.sites.SITES`) and of the
    metric's gradient with respect to it, through the model's own attention; with
    ``record``, the run's :class:`Clean` record too (what direct logit attribution
    and the patching estimate read; not the layers' outputs, which only the exact
    sweeps start from), from the same pass. ``during`` is entered around the forward
    pass (the heads' statistics recorded as it goes). ``run`` names the run in errors."""
    import torch

    kept: list[Any] = [None] * len(body.blocks)  # each layer's (value, tensor of the graph)
    reduced: list[Any] = [None] * len(body.blocks)
    start: list[torch.Tensor] = []
    steps = _Steps(2 * len(body.blocks))  # each layer read on the way up, then down

    def keeper(layer: int) -> Found:
        def keep(value: torch.Tensor, graph: torch.Tensor) -> None:
            # The forward's own: a layer computed again in the backward pass runs the hooks
            # inside it again, and what it computes there must not outlive that layer's step.
            if kept[layer] is not None or not graph.requires_grad:
                return
            kept[layer] = (value.detach(), graph)
            steps.step()

            def read(gradient: torch.Tensor) -> None:
                reduced[layer] = reduce(layer, kept[layer][0], gradient.detach())
                steps.step()

            graph.register_hook(read)

        return keep

    def leaf(_module: Any, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        # Every activation above depends on it, whether or not the weights ask for gradients.
        start.append(output.detach().requires_grad_(True))
        return start[-1]

    with torch.enable_grad(), contextlib.ExitStack() as hooks:
        hooks.enter_context(weights_without_gradients(model))
        hooks.enter_context(recomputed_when_long(model, body, arguments))
        finish = hooks.enter_context(clean_recording(body, starts=False)) if record else None
        # Before ``during``: a recording of the heads' statistics runs an attention function
        # of its own (by windows too, where these apply), which must be the one called.
        hooks.enter_context(windowed(model, arguments))
        if during is not None:
            hooks.enter_context(during)
        embeddings = model.get_input_embeddings()
        hooks.enter_context(hooked(embeddings.register_forward_hook(leaf)))
        for layer in range(len(body.blocks)):
            for handle in reading(body, site, layer, keeper(layer)):
                hooks.enter_context(hooked(handle))
        logits = last_logits(model, arguments)
        value = metric.of(logits)[0]
        # The hooks read each layer on the way down to the first layer's activation: below
        # it (the first attention's backward, for heads) nothing is read.
        lowest = next((graph for _, graph in filter(None, kept)), None)
        backward_to(value, start if lowest is None else lowest)
    check_metric(float(value.detach()), model, arguments, run)
    if any(found is None for found in reduced):
        raise UsageError(
            "--method gradient cannot read this model: its output has no gradient through "
            "every layer's activation (use --method exact)"
        )
    clean = None if finish is None else finish(logits, metric)
    return Gradients(float(value.detach()), reduced, clean)


class _Steps:
    """A gradient pass's steps, told to a progress listener as each is done."""

    def __init__(self, total: int) -> None:
        self.done, self.total = 0, total

    def step(self) -> None:
        self.done += 1
        advance("gradient pass step", self.done, self.total)


def ablation_estimate(body: Anatomy, ablating: Ablating) -> Reduce:
    """Every head's ablation effect estimated, read at the clean run: Σ over positions of
    ∂metric/∂z · (z_ablated − z), (H) per layer."""

    def reduce(layer: int, z: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        z, gradient = _per_head(body, z), _per_head(body, gradient)  # (T, H, Dh)
        replaced = ablating.replacement(layer, z, lambda inputs: _per_head(body, inputs))
        return (gradient * (replaced - z)).sum((0, 2))

    return reduce


def patch_estimate(body: Anatomy, clean: Sequence[torch.Tensor]) -> Reduce:
    """Every head's patching effect estimated, read at the corrupted run: Σ over positions
    of ∂metric/∂z · (z_clean − z), (H) per layer; ``clean`` holds each layer's clean z,
    (1, T, E)."""

    def reduce(layer: int, z: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        moved = _per_head(body, clean[layer]) - _per_head(body, z)  # (T, H, Dh)
        return (_per_head(body, gradient) * moved).sum((0, 2))

    return reduce


def _per_head(body: Anatomy, head_input: torch.Tensor) -> torch.Tensor:
    """The output projection's input of one text, (1, T, E), in float32 as (T, H, Dh)."""
    size = head_slice(head_input, body.heads, 0).stop  # one head's width, checked
    return head_input[0].float().unflatten(-1, (body.heads, size))


def estimated_trace(
    twins: Twins, site: Site, layers: Sequence[int], by_position: bool = False
) -> Traced:
    """Each of ``layers`` × each cell's patching effect at ``site`` estimated (cells as
    :func:`trace`'s): ∂metric/∂a · (a_clean − a) at the corrupted run, summed over the
    cell's width (and a head's positions, unless ``by_position``)."""
    import torch

    model, body, metric = twins.model, twins.body, twins.metric

    with (
        torch.inference_mode(),
        windowed(model, twins.clean_arguments),
        recorded(model, body, site) as activations,
    ):
        logits = last_logits(model, twins.clean_arguments)
    clean = float(metric.of(logits)[0])
    check_metric(clean, model, twins.clean_arguments, "clean run")
    log_prob = float(logits.float().log_softmax(-1)[0, metric.answer_id])
    if SITES[site].pattern:
        reduce, read_at = _pattern_estimate(twins, activations, by_position), Site.Z
    else:
        reduce, read_at = _site_estimate(body, site, activations, by_position), site
    at_corrupt = gradients(
        model, body, twins.corrupt_arguments, metric, read_at, reduce, run=CORRUPTED_RUN
    )
    return Traced(clean, at_corrupt.metric, log_prob, at_corrupt.of(layers))


def _site_estimate(body: Anatomy, site: Site, clean: list[Any], by_position: bool) -> Reduce:
    """∂metric/∂a · (a_clean − a), summed over each cell; ``clean``: each layer's record."""

    def reduce(layer: int, corrupt: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        units = units_of(body, site, layer, corrupt.shape[-1])
        columns = units.columns
        moved = clean[layer][0, :, columns].float() - corrupt[0, :, columns].float()
        product = moved * gradient[0, :, columns].float()  # (T, U·Dh)
        per_unit = product.unflatten(-1, (units.count, units.size)).sum(-1)  # (T, U)
        if not site.of_heads:
            return per_unit[:, 0]  # (T)
        return per_unit.T if by_position else per_unit.sum(0)  # (U, T) or (U)

    return reduce


def _pattern_estimate(twins: Twins, clean: list[Any], by_position: bool) -> Reduce:
    """∂metric/∂A · (A_clean − A) at the corrupted run, read through each head's output:
    z = A v, so ∂metric/∂A_ij = ∂metric/∂z_i · v_j, and the sum over a head's weights is
    Σ_i ∂metric/∂z_i · ((A_clean − A) v)_i (the corrupted run's weights and values read
    by one pass of its own first)."""
    import torch

    body = twins.body
    with (
        torch.inference_mode(),
        recorded(twins.model, body, Site.PATTERN) as corrupt,
        recorded(twins.model, body, Site.V) as values,
    ):
        last_logits(twins.model, twins.corrupt_arguments)

    def reduce(layer: int, _z: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        value = values[layer]  # (1, S, W)
        units = units_of(body, Site.V, layer, value.shape[-1])
        per_kv = value[0, :, units.columns].float().unflatten(-1, (units.count, units.size))
        per_head = per_kv.repeat_interleave(body.heads // units.count, dim=1)  # (S, H, Dh)
        moved = clean[layer][0].float() - corrupt[layer][0].float()  # (H, T, S)
        changed = torch.einsum("hts,shd->thd", moved, per_head)  # (T, H, Dh): Δz
        product = (_per_head(body, gradient) * changed).sum(-1)  # (T, H)
        return product.T if by_position else product.sum(0)

    return reduce
