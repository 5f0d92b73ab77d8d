"""Norms read as linear maps: a norm's scale frozen at what it was in the clean run, so
that what one head writes can be followed through it to the logits (direct logit
attribution; TransformerLens's ``apply_ln=True``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnviz.errors import UsageError

if TYPE_CHECKING:
    import torch

    from attnviz.pretrained.effects import Clean


def frozen_norm(
    norm: Any, residual: torch.Tensor, normed: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The final norm as a linear map, its scale frozen at the clean residual's (D,)."""
    return linear_norm(*norm_form(norm, residual, normed))


def norm_form(
    norm: Any, residual: torch.Tensor, normed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """What ``norm`` did to ``residual`` (..., D), giving ``normed``: its gain (D), its scale
    for each row (..., 1), float32, and whether it centres. A LayerNorm centres, an RMSNorm
    does not; whose gain it is (the weight, or Gemma's 1 + weight) is read from the form
    that gives back what the norm computed."""
    import torch

    x, y = residual.float(), normed.float()
    weight = getattr(norm, "weight", None)
    weight = torch.ones(x.shape[-1], device=x.device) if weight is None else weight.float()
    bias = getattr(norm, "bias", None)
    shift = torch.zeros_like(weight) if bias is None else bias.float()
    eps = next(
        (
            float(value)
            for name in ("eps", "variance_epsilon", "epsilon")
            if isinstance(value := getattr(norm, name, None), float | int)
        ),
        1e-6,
    )
    centred = "layernorm" in type(norm).__name__.lower()
    moved = x - x.mean(-1, keepdim=True) if centred else x
    scale = (moved.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    # The norm's output was rounded to the model's dtype: bfloat16 keeps 8 bits (2^-8).
    tolerance = max(1e-3, 2 * torch.finfo(normed.dtype).eps)
    for gain in (weight, 1 + weight):
        if torch.allclose(
            gain * moved / scale + shift,
            y,
            rtol=tolerance,
            atol=tolerance * float(y.abs().max()),
        ):
            return gain, scale, centred
    raise UsageError(
        f"attnviz cannot read {type(norm).__name__} as a LayerNorm or an RMSNorm: no "
        "attribution through it"
    )


def linear_norm(
    gain: torch.Tensor, scale: torch.Tensor, centred: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    def frozen(written: torch.Tensor) -> torch.Tensor:  # (N, D) -> (N, D)
        moved = written - written.mean(-1, keepdim=True) if centred else written
        return gain * moved / scale

    return frozen


def through_post_norm(
    norm: Any, clean: Clean, layer: int
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A layer's post-attention norm frozen at the clean attention output's scale, once it is
    seen to normalise that output (and not something else by the same name)."""
    import torch

    recorded = clean.post_normed[layer]
    assert recorded is not None  # the clean pass records every post norm's
    normed_input, normed_output = recorded
    if not torch.allclose(normed_input.float(), clean.written[layer].float(), atol=1e-5):
        raise UsageError(
            f"attnviz cannot attribute layer {layer}'s heads: its post_attention_layernorm does "
            "not normalise the attention's output"
        )
    return frozen_norm(norm, normed_input, normed_output)
