"""Norms read as what they are, a LayerNorm or an RMSNorm (:class:`NormForm`): as linear
maps, a norm's scale frozen at what it was in the clean run, so that what one head writes
can be followed through it to the logits (direct logit attribution; TransformerLens's
``apply_ln=True``); and their backward written out, for the gradients edges are scored by."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnviz.errors import UsageError

if TYPE_CHECKING:
    import torch


def frozen_norm(
    norm: Any, residual: torch.Tensor, normed: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The final norm as a linear map, its scale frozen at the clean residual's (D,)."""
    return linear_norm(*norm_form(norm, residual, normed))


def norm_form(
    norm: Any, residual: torch.Tensor, normed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """What ``norm`` did to ``residual`` (..., D), giving ``normed``: its gain (D), its scale
    for each row (..., 1), float32, and whether it centres (:func:`form_of`)."""
    form = form_of(norm, residual, normed)
    return form.gain, form.scale(residual.float()), form.centred


@dataclass(frozen=True)
class NormForm:
    """A LayerNorm (``centred``) or an RMSNorm: gain × (x, centred where it centres) /
    √(mean square + eps), plus a bias; its gain the weight plus ``offset`` (Gemma's 1)."""

    gain: torch.Tensor  # (D) float32
    centred: bool
    eps: float
    offset: float

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """(..., 1): each row's divisor, x (..., D) float32."""
        return self._moved_and_scale(x)[1]

    def _moved_and_scale(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x centred where the norm centres, (..., D), and each row's divisor, (..., 1)."""
        moved = x - x.mean(-1, keepdim=True) if self.centred else x
        return moved, (moved.pow(2).mean(-1, keepdim=True) + self.eps).sqrt()

    def like(self, norm: Any) -> NormForm:
        """Another norm of the same kind: its own gain and eps."""
        return _form(norm, self.centred, self.offset, self.gain)

    def backward(
        self, x: torch.Tensor, given: torch.Tensor, divisor_held: bool = False
    ) -> torch.Tensor:
        """What the norm's input gets back, (..., n, D) float32, from ``given`` (..., n, D),
        what each of n copies of its output gets, at the input ``x`` (..., D): with x̂ the
        normed input and r its divisor, (h − mean h (where it centres) − x̂ mean(h x̂)) / r,
        h = gain × given; with ``divisor_held`` (RelP's LN-rule) r a constant: the x̂ term
        goes. Written out: autograd's engine costs a launch-bound GPU more than the
        arithmetic, once for each group of nodes."""
        moved, scale = self._moved_and_scale(x.float())  # (..., D), (..., 1)
        h = given.float() * self.gain  # (..., n, D)
        if self.centred:
            h = h - h.mean(-1, keepdim=True)
        if divisor_held:
            return h / scale.unsqueeze(-2)
        normed = (moved / scale).unsqueeze(-2)  # (..., 1, D)
        return (h - normed * (h * normed).mean(-1, keepdim=True)) / scale.unsqueeze(-2)


def form_of(norm: Any, residual: torch.Tensor, normed: torch.Tensor) -> NormForm:
    """The form of ``norm``, which gave ``normed`` from ``residual`` (..., D). A LayerNorm
    centres, an RMSNorm does not; whose gain it is (the weight, or Gemma's 1 + weight) is
    read from the form that gives back what the norm computed."""
    import torch

    x, y = residual.float(), normed.float()
    weight = getattr(norm, "weight", None)
    if weight is not None and tuple(weight.shape) != (x.shape[-1],):  # not a gain
        raise _not_a_norm(norm)
    centred = "layernorm" in type(norm).__name__.lower()
    bias = getattr(norm, "bias", None)
    shift = 0.0 if bias is None else bias.float()
    # The norm's output was rounded to the model's dtype: bfloat16 keeps 8 bits (2^-8).
    tolerance = max(1e-3, 2 * torch.finfo(normed.dtype).eps)
    for offset in (0.0, 1.0):
        form = _form(norm, centred, offset, x)
        moved, scale = form._moved_and_scale(x)
        if torch.allclose(
            form.gain * moved / scale + shift,
            y,
            rtol=tolerance,
            atol=tolerance * float(y.abs().max()),
        ):
            return form
    raise _not_a_norm(norm)


def _not_a_norm(norm: Any) -> UsageError:
    return UsageError(
        f"attnviz cannot read {type(norm).__name__} as a LayerNorm or an RMSNorm: no "
        "attribution through it"
    )


def _form(norm: Any, centred: bool, offset: float, like: torch.Tensor) -> NormForm:
    """``norm``'s form with its gain its weight + ``offset`` (ones where it has no weight,
    as wide as ``like`` and on its device)."""
    import torch

    weight = getattr(norm, "weight", None)
    if weight is None:
        gain = torch.ones(like.shape[-1], device=like.device)
    else:
        gain = weight.float() + offset if offset else weight.float()
    eps = next(
        (
            float(value)
            for name in ("eps", "variance_epsilon", "epsilon")
            if isinstance(value := getattr(norm, name, None), float | int)
        ),
        1e-6,
    )
    return NormForm(gain, centred, eps, offset)


def linear_norm(
    gain: torch.Tensor, scale: torch.Tensor, centred: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    def frozen(written: torch.Tensor) -> torch.Tensor:  # (N, D) -> (N, D)
        moved = written - written.mean(-1, keepdim=True) if centred else written
        return gain * moved / scale

    return frozen


def through_post_norm(
    norm: Any, recorded: tuple[Any, Any] | None, written: torch.Tensor, layer: int
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A layer's post-attention norm frozen at the clean attention output's scale, once it is
    seen to normalise that output, ``written`` (and not something else by the same name):
    ``recorded``, the norm's input and output in the clean pass."""
    import torch

    assert recorded is not None  # the clean pass records every post norm's
    normed_input, normed_output = recorded
    if not torch.allclose(normed_input.float(), written.float(), atol=1e-5):
        raise UsageError(
            f"attnviz cannot attribute layer {layer}'s heads: its post_attention_layernorm does "
            "not normalise the attention's output"
        )
    return frozen_norm(norm, normed_input, normed_output)
