"""The built-in attention against the math and against PyTorch's own implementation."""

from __future__ import annotations

import pytest
import torch

from attnviz.builtin import BuiltinConfig, BuiltinTransformer, MultiHeadAttention
from attnviz.builtin.attention import causal_mask


def random_inputs(batch=2, queries=5, keys=5, width=16, seed=1):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, queries, width, generator=generator)
    memory = torch.randn(batch, keys, width, generator=generator)
    return query, memory


def torch_reference(heads=4, width=16, seed=0):
    torch.manual_seed(seed)
    return torch.nn.MultiheadAttention(width, heads, batch_first=True).eval()


@pytest.mark.parametrize(
    ("kind", "queries", "keys"), [("self", 5, 5), ("causal", 6, 6), ("cross", 3, 7)]
)
def test_matches_torch_multihead_attention(kind, queries, keys):
    reference = torch_reference()
    ours = MultiHeadAttention.from_torch(reference)
    query, memory = random_inputs(queries=queries, keys=keys)
    key = value = query if kind != "cross" else memory
    causal = kind == "causal"
    mask = causal_mask(queries, keys) if causal else None
    with torch.no_grad():
        expected_out, expected_weights = reference(
            query, key, value, attn_mask=mask, need_weights=True, average_attn_weights=False
        )
        out, weights = ours(query, key, value, causal=causal)
    assert weights.shape == (2, 4, queries, keys)
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, expected_out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("projections", ["learned", "identity"])
@pytest.mark.parametrize(("causal", "queries", "keys"), [(False, 4, 6), (True, 5, 5)])
def test_per_head_loop_equals_batched(projections, causal, queries, keys):
    torch.manual_seed(3)
    attention = MultiHeadAttention(16, 4, projections=projections)
    query, memory = random_inputs(queries=queries, keys=keys)
    key = query if causal else memory
    with torch.no_grad():
        batched = attention(query, key, key, causal=causal)
        looped = attention.forward_per_head(query, key, key, causal=causal)
    torch.testing.assert_close(batched[1], looped[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(batched[0], looped[0], atol=1e-6, rtol=0)


def test_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match="bias"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="width"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, kdim=4, vdim=4))


def test_causal_mask_needs_square_maps():
    with pytest.raises(ValueError, match="as many queries as keys"):
        causal_mask(3, 4)


def stack_maps(tokens, mode="self", target=None, **config):
    stack = BuiltinTransformer(BuiltinConfig(**config))
    return stack.attention_maps(tokens, mode=mode, target_tokens=target)


SENTENCE = "the cat sat on the mat because it was warm".split()


@pytest.mark.parametrize("mode", ["self", "masked"])
def test_rows_are_distributions(mode):
    for weights in stack_maps(SENTENCE, mode).values():
        assert weights.shape == (4, len(SENTENCE), len(SENTENCE))
        assert (weights >= 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(4, len(SENTENCE)))


def test_masked_upper_triangle_is_exactly_zero_and_lower_is_not():
    for weights in stack_maps(SENTENCE, "masked", num_layers=3).values():
        above = torch.ones(len(SENTENCE), len(SENTENCE), dtype=torch.bool).triu(1)
        assert (weights[:, above] == 0).all()
        assert (weights[:, ~above] > 0).all()
        assert (weights[:, 0, 0] == 1).all()  # the first token can only see itself


def test_cross_maps_are_target_by_source():
    target = "le chat".split()
    maps = stack_maps(SENTENCE, "cross", target=target)
    for weights in maps.values():
        assert weights.shape == (4, len(target), len(SENTENCE))
        torch.testing.assert_close(weights.sum(-1), torch.ones(4, len(target)))


def test_same_seed_same_weights_other_seed_other_weights():
    first = stack_maps(SENTENCE, seed=7)
    again = stack_maps(SENTENCE, seed=7)
    other = stack_maps(SENTENCE, seed=8)
    for layer in first:
        assert torch.equal(first[layer], again[layer])
        assert not torch.allclose(first[layer], other[layer])


def test_without_positions_attention_is_permutation_equivariant():
    permutation = torch.randperm(len(SENTENCE), generator=torch.Generator().manual_seed(0))
    shuffled = [SENTENCE[i] for i in permutation]
    original = stack_maps(SENTENCE, positions=False)
    permuted = stack_maps(shuffled, positions=False)
    for layer in original:
        expected = original[layer][:, permutation][:, :, permutation]
        torch.testing.assert_close(permuted[layer], expected, atol=1e-5, rtol=1e-5)
    # With positions the same shuffle changes more than the order.
    positioned = stack_maps(SENTENCE)[0][:, permutation][:, :, permutation]
    assert not torch.allclose(stack_maps(shuffled)[0], positioned, atol=1e-3)


def test_identity_projections_attend_most_to_the_same_word():
    tokens = "dog cat dog bird cat dog".split()
    for positions in (True, False):
        for weights in stack_maps(tokens, projections="identity", positions=positions).values():
            for row, token in enumerate(tokens):
                best = weights[:, row].argmax(-1)
                assert all(tokens[column] == token for column in best.tolist())
                if positions:  # positions make repeats differ slightly: itself wins
                    assert (best == row).all()


def test_only_requested_layers_are_returned():
    stack = BuiltinTransformer(BuiltinConfig(num_layers=4))
    assert set(stack.attention_maps(SENTENCE, layers=[1, 3])) == {1, 3}
    full = stack.attention_maps(SENTENCE)
    torch.testing.assert_close(stack.attention_maps(SENTENCE, layers=[2])[2], full[2])


def test_config_rejects_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="multiple of num_heads"):
        BuiltinConfig(d_model=10, num_heads=4)
    BuiltinConfig(d_model=10, num_heads=4, projections="identity")  # every head sees all of X
