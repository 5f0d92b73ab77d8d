"""Sliding-window attention computed over its window alone.

Through transformers' fused path, a layer that attends over a sliding window (Gemma 3,
Mistral) runs PyTorch's kernel over the whole text with a T × T mask: at 32,768 tokens and
a 512-token window, 32 times the scores the window needs, and a mask of T² bytes (with a
copy in the scores' dtype inside the kernel). Where it :func:`applies`,
:func:`attention_by_windows` cuts such a layer's queries into blocks of W (the window)
rows, each attending to its own block's keys and the block's before through the same
fused kernel; the keys a query may read are the same, so are the numbers. A global layer
runs the kernel causal, as the model's own fused path does without padding, and no mask
is built at all. The gradient passes run it through :func:`windowed`; the passes that
record maps and statistics through :func:`attnviz.pretrained.fused.recording`, which
hands the blocks that compute weights the window instead of a mask.

Shape letters: B texts, H query heads, K key/value heads, T tokens, D head size, W the
window, N blocks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from attnviz.pretrained.implementations import running

if TYPE_CHECKING:
    import torch

WINDOWED = "attnviz_windowed"  # the attention implementation's name while it is open


def applies(model: Any, arguments: dict) -> bool:
    """Whether every attention call of ``model`` on ``arguments`` can do without a mask: a
    sliding window shorter than the text, the model's fused attention (no soft-capping,
    which that kernel does not do), token ids alone and no padding."""
    config = model.config
    window = getattr(config, "sliding_window", None)
    ids, mask = arguments.get("input_ids"), arguments.get("attention_mask")
    return (
        isinstance(window, int)
        and getattr(config, "_attn_implementation", None) == "sdpa"
        and not getattr(config, "attn_logit_softcapping", None)
        and set(arguments) <= {"input_ids", "attention_mask"}
        and ids is not None
        and ids.shape[-1] > window
        and (mask is None or bool(mask.all()))
    )


@contextlib.contextmanager
def windowed(model: Any, arguments: dict) -> Iterator[None]:
    """While open, ``model`` computes each sliding-window layer's attention over the window
    alone, where that is the same computation for ``arguments`` (else nothing changes). The
    model's attention implementation and transformers' registry are left as they were."""
    if not applies(model, arguments):
        yield
        return
    # No mask function is given: transformers builds no mask.
    with running(model, WINDOWED, attention_by_windows):
        yield


def attention_by_windows(module, query, key, value, mask, *args, **kwargs):
    """An attention function for transformers: (B, H, T, D) queries, (B, K, T, D) keys and
    values -> ((B, T, H, D), None). A call over a window shorter than the text is computed
    by blocks; any other as transformers' fused function computes it."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    window = kwargs.get("sliding_window")
    by_blocks = (
        mask is None
        and not args
        and not kwargs.get("dropout")
        and isinstance(window, int)
        and query.shape[2] == key.shape[2] > window
        and getattr(module, "is_causal", True)
    )
    if not by_blocks:
        return sdpa_attention_forward(module, query, key, value, mask, *args, **kwargs)
    scaling = kwargs.get("scaling")
    return over_window(query, key, value, window, scaling), None


def over_window(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: int,
    scaling: float | None = None,
) -> torch.Tensor:
    """Causal attention of each position over the ``window`` positions up to itself (the
    key j is read by the query i where i − W < j ≤ i), by blocks of W queries: (B, H, T, D)
    queries, (B, K, T, D) keys and values -> (B, T, H, D)."""
    import torch
    import torch.nn.functional as F

    batch, heads, tokens, size = query.shape
    blocks = -(-tokens // window)
    after = blocks * window - tokens  # the last block's rows past the text
    key = key.repeat_interleave(heads // key.shape[1], dim=1)  # (B, H, T, D)
    value = value.repeat_interleave(heads // value.shape[1], dim=1)

    def keys_of_blocks(states: torch.Tensor) -> torch.Tensor:
        # Block n's keys: the W positions before it, then its own. (B·N, H, 2W, D)
        padded = F.pad(states, (0, 0, window, after))  # (B, H, (N + 1)·W, D)
        pairs = padded.unfold(2, 2 * window, window)  # (B, H, N, D, 2W)
        return pairs.permute(0, 2, 1, 4, 3).reshape(batch * blocks, heads, 2 * window, size)

    queries = F.pad(query, (0, 0, 0, after)).unflatten(2, (blocks, window))  # (B, H, N, W, D)
    queries = queries.transpose(1, 2).reshape(batch * blocks, heads, window, size)
    row = torch.arange(window, device=query.device)[:, None]
    column = torch.arange(2 * window, device=query.device)[None]
    # Row a of block n is position n·W + a, column c the key n·W − W + c.
    visible = ((column > row) & (column <= row + window)).repeat(blocks, 1, 1)  # (N, W, 2W)
    visible[0, :, :window] = False  # the first block has no keys before the text
    mask = visible.repeat(batch, 1, 1).unsqueeze(1)  # (B·N, 1, W, 2W)
    read = F.scaled_dot_product_attention(
        queries, keys_of_blocks(key), keys_of_blocks(value), attn_mask=mask, scale=scaling
    )  # (B·N, H, W, D)
    read = read.unflatten(0, (batch, blocks)).transpose(2, 3)  # (B, N, W, H, D)
    return read.reshape(batch, blocks * window, heads, size)[:, :tokens].contiguous()
