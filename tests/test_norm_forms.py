"""A norm read as what it is (`frozen_norms.form_of`): its kind found from what it
computed, and its backward written out equal to autograd's through the module itself."""

from __future__ import annotations

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from attnviz.errors import UsageError
from attnviz.pretrained.frozen_norms import form_of

WIDTH = 16


def _norms() -> dict[str, tuple[torch.nn.Module, bool, float]]:
    """Each kind of norm with random parameters: the norm, whether it centres, the offset
    of its gain from its weight."""
    generator = torch.Generator().manual_seed(0)
    layer_norm = torch.nn.LayerNorm(WIDTH)
    llama, gemma = LlamaRMSNorm(WIDTH, eps=1e-6), Gemma3RMSNorm(WIDTH, eps=1e-6)
    with torch.no_grad():
        for norm in (layer_norm, llama, gemma):
            norm.weight.copy_(torch.randn(WIDTH, generator=generator))
        layer_norm.bias.copy_(torch.randn(WIDTH, generator=generator))
    return {
        "layernorm": (layer_norm, True, 0.0),
        "llama": (llama, False, 0.0),
        "gemma": (gemma, False, 1.0),
    }


@pytest.mark.parametrize("kind", ["layernorm", "llama", "gemma"])
def test_a_norms_backward_written_out_equals_autograds(kind):
    norm, centred, offset = _norms()[kind]
    generator = torch.Generator().manual_seed(1)
    x = 3 * torch.randn(2, 5, WIDTH, generator=generator) + 1  # (R, T, D), off centre
    given = torch.randn(2, 5, 3, WIDTH, generator=generator)  # (R, T, n, D): three copies
    with torch.no_grad():
        form = form_of(norm, x, norm(x))
    assert (form.centred, form.offset) == (centred, offset)
    copies = x.unsqueeze(2).expand(given.shape).requires_grad_(True)
    (expected,) = torch.autograd.grad(norm(copies), copies, given)
    torch.testing.assert_close(form.backward(x, given), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(form.like(norm).gain, form.gain)


def test_what_is_not_a_norm_is_refused_in_one_line():
    doubled = torch.nn.Linear(WIDTH, WIDTH)
    x = torch.randn(4, WIDTH)
    with pytest.raises(UsageError, match="cannot read Linear as a LayerNorm or an RMSNorm"):
        form_of(doubled, x, doubled(x).detach())
