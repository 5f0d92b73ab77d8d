"""What each key writes through each head: the norm of its value vector after the
head's slice of the output projection, ‖W_O^h v_j‖ (Kobayashi et al. 2020, "Attention
is Not Only a Weight"). Weights times these norms (``--weigh value``) show how much of
each key a head's output actually carries: a sink that takes most of a row while its
value is nearly zero fades.

transformers concatenates the heads' outputs before the output projection, head after
head, so head h's slice of the projection's input is ``h·D … (h+1)·D``.

Shape letters: B inputs, H query heads, K key/value heads, S key tokens, D head size,
E the projection's output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The output projection's name in each family's attention module (Llama, Mistral, Gemma,
# Qwen: o_proj; GPT-2: c_proj; BART, OPT: out_proj; GPT-NeoX, Phi, ALBERT: dense;
# DistilBERT: out_lin; T5, MPNet: o).
PROJECTIONS = ("o_proj", "c_proj", "out_proj", "dense", "out_lin", "o")


def output_projection(model: Any, attention: Any) -> Any | None:
    """The layer that takes ``attention``'s concatenated heads into the residual stream:
    one of its own modules, or (BERT, RoBERTa) the ``output.dense`` beside it in its
    parent; None where there is none."""
    children = dict(attention.named_children())
    for name in PROJECTIONS:
        if name in children:
            return children[name]
    names = {module: name for name, module in model.named_modules()}
    parent = model.get_submodule(names[attention].rpartition(".")[0])
    return getattr(getattr(parent, "output", None), "dense", None)


def input_matrix(projection: Any, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """``projection``'s weight as (inputs, outputs), in ``dtype`` (float32 unless given; the
    weight itself, no copy, in its own): what each input feature adds to the output (a
    Linear's weight transposed, a GPT-2 Conv1D's as it is); None for a layer of another
    kind."""
    import torch

    if isinstance(projection, torch.nn.Linear):
        return projection.weight.detach().to(dtype or torch.float32).T
    if type(projection).__name__ == "Conv1D":  # transformers' GPT-2 projection: x W + b
        return projection.weight.detach().to(dtype or torch.float32)
    return None


def head_factors(matrix: torch.Tensor, heads: int) -> torch.Tensor:
    """For each head, an upper-triangular R_h with ‖R_h v‖ = ‖W_O^h v‖ for every v: the R
    of the QR factorisation of the head's (E, D) slice of ``matrix`` (inputs, outputs).
    A key's norm then costs D², not D·E: (H, min(D, E), D)."""
    import torch

    per_head = matrix.reshape(heads, -1, matrix.shape[1])  # (H, D, E)
    return torch.linalg.qr(per_head.transpose(1, 2), mode="r").R


def value_norms(value: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """‖W_O^h v_j‖ for every input, head and key: (B, H, S) float32, from the values
    (B, K, S, D) an attention function is given (one per key/value head, shared by
    H / K query heads) and :func:`head_factors`."""
    import torch

    heads = factors.shape[0]
    group = heads // value.shape[1]  # query heads per key/value head
    factors = factors.to(value.device)
    norms = [
        torch.linalg.vector_norm(value[:, head // group].float() @ factors[head].T, dim=-1)
        for head in range(heads)
    ]  # H × (B, S): one head at a time, so a long input's values are not copied H times
    return torch.stack(norms, dim=1)
