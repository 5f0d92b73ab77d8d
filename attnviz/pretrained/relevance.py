"""Relevance patching's backward (RelP, Rezaei Jafari et al. 2025): attribution patching
whose local gradients are layer-wise relevance propagation's coefficients. The forward
pass stays the model's own, number for number; what its backward gives back changes, rule
by rule as RelP's table sets them (FarnoushRJ/RelP's README):

- a norm, LayerNorm or RMSNorm (LN-rule, Ali et al. 2022): its divisor held constant, so
  that it gives back gain × what it gets (centred where it centres) / divisor;
- an MLP's activation (identity rule, Jafari et al. 2024): what it gets times act(x) / x,
  the relevance passed through unchanged;
- a gated MLP's product act(gate) × up (half rule): half of the gradient to each factor;
- attention (AH-rule, Ali et al. 2022): its weights held constant, so that no gradient
  reaches a query or a key and a value gets the weights' share;
- a linear map: its own gradient (LRP-0).

Holding the weights is holding the queries and the keys: the weights depend on nothing
else, so the pass keeps the model's fused attention kernel and builds no T × T weights.
Each rule is a hook whose output has the value the module computed and the gradient of the
rule (value.detach() + a term 0 in value whose gradient is the rule's).

Shape letters: T tokens, D the width a norm or an activation reads, W a projection's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from attnviz.choices import Site
from attnviz.errors import UsageError
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.frozen_norms import NormForm, form_of
from attnviz.pretrained.sites import SITES, hidden_of, hooked

if TYPE_CHECKING:
    import torch


class Rule(StrEnum):
    """A propagation rule of RelP's table: what it replaces the gradient of."""

    NORM = "norm"  # LN-rule: the norms' divisors held
    ACTIVATION = "activation"  # identity rule: act(x) / x through an MLP's activation
    GATE = "gate"  # half rule: a gated MLP's product gives each factor half
    ATTENTION = "attention"  # AH-rule: the attention weights held


RELP = frozenset(Rule)  # --method relp: every rule of the table
STABLE = 1e-6  # act(x) / x's x moved away from 0 by this, as RelP's own stabilize does


@contextlib.contextmanager
def relevance_rules(model: Any, body: Anatomy, rules: frozenset[Rule]) -> Iterator[None]:
    """While open, ``model``'s backward follows ``rules`` (nothing changes without any).
    Hooks put on first, so that the hooks a pass puts on after them read what they give."""
    if not rules:
        yield
        return
    with contextlib.ExitStack() as hooks:
        if Rule.NORM in rules:
            for norm, form in _norm_forms(model):
                hooks.enter_context(
                    hooked(norm.register_forward_hook(_held_divisor(form), with_kwargs=True))
                )
        for layer in range(len(body.blocks)):
            mlp = SITES[Site.MLP].module(body, layer)
            if Rule.ACTIVATION in rules:
                activation = _activation(mlp, layer)
                hooks.enter_context(hooked(activation.register_forward_hook(_identity)))
            gated = _gate_output(mlp, layer) if Rule.GATE in rules else None
            if gated is not None:
                hooks.enter_context(hooked(gated.register_forward_pre_hook(_halved)))
            if Rule.ATTENTION in rules:
                for module, held in _queries_and_keys(body, layer):
                    hooks.enter_context(hooked(module.register_forward_hook(held)))
        yield


def _norm_forms(model: Any) -> list[tuple[Any, NormForm]]:
    """Every norm in ``model`` (a module without children whose class is a ...Norm) with its
    form, read from a probe once for each class (and each width: Gemma 3's query and key
    norms are a head wide)."""
    import torch

    kinds: dict[tuple[type, int], NormForm] = {}
    found = []
    for module in model.modules():
        if next(module.children(), None) is not None or not type(module).__name__.endswith("Norm"):
            continue
        weight = getattr(module, "weight", None)
        if weight is None:
            raise UsageError(
                f"RelP holds each norm's divisor: attnviz cannot read the width of "
                f"{type(module).__name__}, which has no weight"
            )
        key = (type(module), int(weight.shape[-1]))
        if key not in kinds:
            probe = torch.linspace(-1.0, 2.0, key[1], device=weight.device, dtype=weight.dtype)
            with torch.no_grad():
                kinds[key] = form_of(module, probe, module.forward(probe))
        found.append((module, kinds[key].like(module)))
    return found


def _held_divisor(form: NormForm) -> Callable:
    """A norm's forward hook: its output as it was, whose gradient is the norm's with the
    divisor held: gain × (the change, centred where the norm centres) / divisor."""

    def held(_module: Any, args: tuple, kwargs: dict, output: torch.Tensor) -> torch.Tensor:
        x = hidden_of(args, kwargs)  # (..., D)
        change = (x - x.detach()).float()  # 0 in value: the gradient's path alone
        if form.centred:
            change = change - change.mean(-1, keepdim=True)
        divisor = form.scale(x.detach().float())  # (..., 1)
        return output.detach() + (form.gain * change / divisor).to(output.dtype)

    return held


def _identity(_module: Any, args: tuple, output: torch.Tensor) -> torch.Tensor:
    """An activation's forward hook: its output as it was, with gradient act(x) / x."""
    x = args[0]  # (..., D)
    moved = x.detach() + ((x.detach() == 0).to(x.dtype) + x.detach().sign()) * STABLE
    return output.detach() + (x - x.detach()) * (output.detach() / moved)


def _halved(_module: Any, args: tuple) -> tuple:
    """The gated product's forward pre-hook (the down projection's input): the same value,
    half of its gradient given back, so that each factor of act(gate) × up gets half."""
    product = args[0] / 2  # exact in binary floating point: the halves sum to the whole
    return (product + product.detach(), *args[1:])


# Children of an MLP that are no activation: its projections and its dropout
_NOT_ACTIVATIONS = ("Linear", "Conv1D", "Dropout")


def _activation(mlp: Any, layer: int) -> Any:
    """The activation module of a layer's MLP; a usage error where it has none."""
    found = [
        child
        for child in mlp.children()
        if not any(True for _ in child.parameters())
        and not type(child).__name__.endswith(_NOT_ACTIVATIONS)
    ]
    if len(found) != 1:
        raise UsageError(
            f"RelP passes an MLP's activation back by the identity rule: attnviz finds "
            f"{len(found)} activation modules in layer {layer}'s {type(mlp).__name__} "
            "(it needs one): not --method relp"
        )
    return found[0]


_GATED = ("gate_proj", "up_proj", "down_proj")  # act(gate_proj(x)) × up_proj(x) → down_proj


def _gate_output(mlp: Any, layer: int) -> Any:
    """A gated MLP's down projection, which reads act(gate) × up; None for an MLP without
    a gate; a usage error for a gate laid out otherwise."""
    children = dict(mlp.named_children())
    if all(name in children for name in _GATED):
        return children["down_proj"]
    if any("gate" in name for name in children):
        raise UsageError(
            f"RelP halves a gated MLP's product: attnviz knows the gate of gate_proj, "
            f"up_proj and down_proj, not layer {layer}'s {type(mlp).__name__} "
            f"({', '.join(children)}): not --method relp"
        )
    return None


def _queries_and_keys(body: Anatomy, layer: int) -> list[tuple[Any, Callable]]:
    """Forward hooks holding a layer's queries and keys: (module, hook) for each projection
    (one for a fused one). A projection of queries or keys alone gives its output detached;
    a fused one gives back no gradient at its query and key columns (its values' get
    theirs), a hook on its output put on before any pass reads that gradient."""
    held: dict[Any, list[Site]] = {}
    for site in (Site.Q, Site.K):
        held.setdefault(SITES[site].module(body, layer), []).append(site)

    def holding(sites: list[Site]) -> Callable:
        def hold(_module: Any, _args: tuple, output: torch.Tensor) -> torch.Tensor | None:
            import torch

            width = output.shape[-1]  # (..., W)
            kept = torch.zeros(width, dtype=torch.bool, device=output.device)
            for site in sites:
                kept[SITES[site].part(body, layer, width)] = True
            if bool(kept.all()):
                return output.detach()
            if output.requires_grad:
                output.register_hook(lambda gradient: gradient.masked_fill(kept, 0))
            return None

        return hold

    return [(module, holding(sites)) for module, sites in held.items()]
