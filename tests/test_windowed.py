"""Sliding-window attention computed by blocks over the window alone (the gradient passes
on long texts), held to PyTorch's fused attention over the whole text with the window's
mask written out, and to hooks on a tiny random Gemma 3."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnviz.pretrained import windowed
from tests.checks import float32_tolerance
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS


def _masked(query, key, value, window, scaling):
    """Every query over every key, the keys outside its window masked: (B, T, H, D)."""
    tokens, groups = query.shape[2], query.shape[1] // key.shape[1]
    later = torch.arange(tokens)[None] > torch.arange(tokens)[:, None]
    behind = torch.arange(tokens)[None] <= torch.arange(tokens)[:, None] - window
    read = F.scaled_dot_product_attention(
        query,
        key.repeat_interleave(groups, 1),
        value.repeat_interleave(groups, 1),
        attn_mask=~(later | behind),
        scale=scaling,
    )
    return read.transpose(1, 2)


@pytest.mark.parametrize(
    ("batch", "heads", "kv_heads", "tokens", "window"),
    [(1, 4, 1, 37, 4), (2, 4, 2, 64, 16), (1, 2, 2, 5, 4), (1, 3, 1, 100, 7)],
)
def test_attention_over_the_window_equals_the_whole_texts_masked(
    batch, heads, kv_heads, tokens, window
):
    """The same outputs and the same gradients of queries, keys and values, whether the text
    is a multiple of the window or not, with grouped-query heads and a batch."""
    generator = torch.Generator().manual_seed(tokens)
    query, key, value = (
        torch.randn(batch, count, tokens, 8, generator=generator, requires_grad=True)
        for count in (heads, kv_heads, kv_heads)
    )
    expected = _masked(query, key, value, window, 0.3)
    found = windowed.over_window(query, key, value, window, 0.3)
    # Sums over a window's keys (outputs) and over every query (a key's gradient), in
    # another order than the whole text's: float32's rounding for them, at their scale.
    torch.testing.assert_close(found, expected, atol=_rounding(2 * window * 8, expected), rtol=0)
    pulled = torch.randn(expected.shape, generator=generator)
    expected_gradients = torch.autograd.grad((expected * pulled).sum(), (query, key, value))
    found_gradients = torch.autograd.grad((found * pulled).sum(), (query, key, value))
    for found_gradient, expected_gradient in zip(found_gradients, expected_gradients, strict=True):
        tolerance = _rounding(tokens * 8, expected_gradient)
        torch.testing.assert_close(found_gradient, expected_gradient, atol=tolerance, rtol=0)


def _rounding(terms: int, expected: torch.Tensor) -> float:
    return float32_tolerance(terms) * max(1.0, float(expected.detach().abs().max()))


@pytest.fixture
def blocks(monkeypatch) -> list[int]:
    """The window of each attention call computed by windows, in the order of the calls."""
    seen: list[int] = []
    by_blocks = windowed.over_window

    def counted(query, key, value, window, scaling=None):
        seen.append(window)
        return by_blocks(query, key, value, window, scaling)

    monkeypatch.setattr(windowed, "over_window", counted)
    return seen


def test_the_gradient_passes_compute_sliding_layers_by_windows_and_restore_the_model(
    language_models, blocks
):
    """Gemma 3's two sliding layers (a window of 4, texts longer) run over their windows in
    both gradient passes (clean, corrupted); its global layer does not; the model runs its
    own attention again afterwards and transformers' registry holds no attnviz name."""
    from transformers import AttentionInterface

    extractor = language_models["gemma3-lm"]
    model = extractor.loaded.model
    extractor.head_effects(TEXT, ANSWER, versus=VERSUS, corrupt=CORRUPT, method="gradient")
    assert blocks == [model.config.sliding_window] * 4
    assert model.config._attn_implementation == "sdpa"
    assert windowed.WINDOWED not in AttentionInterface._global_mapping


def test_maps_and_the_statistics_clean_pass_read_sliding_layers_by_windows(language_models, blocks):
    """The maps' pass (weights recorded block by block, held to eager attention in
    tests/test_long.py) and the clean pass that records the heads' statistics for
    `heads --answer --method gradient` run the sliding layers by windows too."""
    extractor = language_models["gemma3-lm"]
    window = extractor.loaded.model.config.sliding_window
    maps = extractor.extract(TEXT)
    assert blocks == [window] * 2
    rows, columns = np.indices(maps.weights.shape[-2:])
    behind = columns <= rows - window
    assert (maps.weights[:2][..., behind] == 0).all()  # the sliding layers
    assert (maps.weights[2][..., behind] > 0).all()  # the global layer
    blocks.clear()
    extractor.head_statistics(TEXT, answer=ANSWER, corrupt=CORRUPT, method="gradient")
    assert blocks == [window] * 4


def test_a_text_no_longer_than_the_window_or_padded_runs_the_models_own_attention(
    language_models,
):
    """Nothing to save (the window holds the whole text), or a mask the blocks would not
    read (padding): the model's attention implementation stays."""
    model = language_models["gemma3-lm"].loaded.model
    window = model.config.sliding_window
    for ids, mask in (
        (torch.ones(1, window, dtype=torch.long), None),
        (torch.ones(1, window + 3, dtype=torch.long), torch.tensor([[0] + [1] * (window + 2)])),
    ):
        with windowed.windowed(model, {"input_ids": ids, "attention_mask": mask}):
            assert model.config._attn_implementation == "sdpa"
