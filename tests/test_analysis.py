"""Aggregation, rollout and flow, head statistics, top keys and diffs, against references."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnviz
from attnviz.analysis.aggregate import FLOW_MAX_TOKENS, aggregate, with_residual
from attnviz.analysis.diff import diff_maps, jensen_shannon
from attnviz.analysis.heads import head_statistics, sort_rows
from attnviz.analysis.top import top_keys
from attnviz.choices import Aggregate
from attnviz.errors import UsageError
from attnviz.head_columns import HeadColumn as Column
from attnviz.maps import AttentionMaps


def hand_made(weights, tokens=None, mode="self"):
    weights = np.asarray(weights, dtype=np.float32)
    layers, heads, queries, keys = weights.shape
    return AttentionMaps(
        query_tokens=tokens or [f"q{i}" for i in range(queries)],
        key_tokens=tokens or [f"k{i}" for i in range(keys)],
        weights=weights,
        layers=list(range(layers)),
        heads=list(range(heads)),
        mode=mode,
        model="hand-made",
    )


def reference_rollout(weights):
    """Rollout written out plainly: average heads, add identity, renormalise, multiply up."""
    layers = weights.shape[0]
    tokens = weights.shape[-1]
    result = np.identity(tokens)
    for layer in range(layers):
        attention = np.zeros((tokens, tokens))
        for head in range(weights.shape[1]):
            attention += weights[layer, head] / weights.shape[1]
        attention = 0.5 * attention + 0.5 * np.identity(tokens)
        for row in range(tokens):
            attention[row] /= attention[row].sum()
        result = np.matmul(attention, result)
    return result


def test_rollout_equals_the_plain_reference():
    maps = attnviz.extract("the cat sat on the mat", config=None)
    rolled = aggregate(maps, "rollout")
    assert rolled.weights.shape == (1, 1, 6, 6)
    assert rolled.aggregate == "rollout"
    np.testing.assert_allclose(rolled.weights[0, 0], reference_rollout(maps.weights), rtol=1e-5)
    np.testing.assert_allclose(rolled.weights.sum(-1), 1, atol=1e-5)


def test_mean_and_max_over_heads_and_over_everything():
    maps = attnviz.extract("the cat sat")
    np.testing.assert_allclose(
        aggregate(maps, "mean").weights[:, 0], maps.weights.mean(1), rtol=1e-6
    )
    np.testing.assert_allclose(aggregate(maps, "max").weights[:, 0], maps.weights.max(1))
    everything = aggregate(maps, "mean-all")
    np.testing.assert_allclose(everything.weights[0, 0], maps.weights.mean((0, 1)), rtol=1e-6)
    assert aggregate(maps, "max-all").weights.shape == (1, 1, 3, 3)


def test_flow_of_one_layer_is_that_layers_residual_map():
    maps = attnviz.extract("the cat sat on the mat", layers=0)
    flowed = aggregate(maps, "flow")
    expected = with_residual(maps.weights[0].astype(np.float64).mean(0))
    np.testing.assert_allclose(flowed.weights[0, 0], expected, atol=1e-5)


def test_flow_on_two_layers_is_bounded_by_rollout_paths():
    maps = attnviz.extract("the cat sat on the mat")
    flowed = aggregate(maps, "flow").weights[0, 0]
    np.testing.assert_allclose(flowed.sum(-1), 1, atol=1e-5)
    assert (flowed > 0).all()


def test_flow_and_rollout_refuse_what_they_cannot_do():
    long_text = " ".join(f"w{i}" for i in range(FLOW_MAX_TOKENS + 1))
    with pytest.raises(UsageError, match=f"limited to {FLOW_MAX_TOKENS} tokens"):
        aggregate(attnviz.extract(long_text, layers=0, heads=0), "flow")
    cross = attnviz.extract("a b", mode="cross", target="c")
    with pytest.raises(UsageError, match="needs self or masked attention"):
        aggregate(cross, "rollout")
    with pytest.raises(UsageError, match="already an aggregate"):
        aggregate(aggregate(cross, "mean"), "mean")


def test_entropy_of_uniform_rows_is_ln_n():
    n = 7
    stats = head_statistics(hand_made(np.full((1, 1, n, n), 1 / n)))
    assert stats[0].entropy == pytest.approx(math.log(n), rel=1e-6)
    one_hot = head_statistics(hand_made(np.eye(n)[None, None]))[0]
    assert one_hot.entropy == pytest.approx(0.0, abs=1e-9)
    assert one_hot.self == pytest.approx(1.0)
    assert one_hot.distance == pytest.approx(0.0)


def test_previous_token_score_of_a_sub_diagonal_map_is_one():
    n = 6
    matrix = np.zeros((n, n))
    matrix[0, 0] = 1
    matrix[np.arange(1, n), np.arange(n - 1)] = 1
    stats = head_statistics(hand_made(matrix[None, None]))[0]
    assert stats.previous == pytest.approx(1.0)
    assert stats.self == pytest.approx(1 / n)
    assert stats.distance == pytest.approx((n - 1) / n)


def test_sink_counts_the_first_and_the_special_tokens_the_maps_mark():
    tokens = ["[CLS]", "hi", "there", "[SEP]"]
    weights = np.tile([0.25, 0.0, 0.25, 0.5], (4, 1))[None, None]
    marked = hand_made(weights, tokens).replace(key_special=[True, False, False, True])
    stats = head_statistics(marked)[0]
    assert stats.sink == pytest.approx(0.75)
    assert stats.top_key == "[SEP]"
    # A word that only looks special (typed into the built-in stack) is not a sink.
    assert head_statistics(hand_made(weights, tokens))[0].sink == pytest.approx(0.25)


def test_cross_mode_has_no_positional_statistics():
    stats = head_statistics(attnviz.extract("a b c", mode="cross", target="d e"))
    assert all(row.distance is None and row.previous is None for row in stats)
    assert len(sort_rows(stats, Column.DISTANCE)) == len(stats)


def test_sorting():
    stats = head_statistics(attnviz.extract("the man walked the dog"))
    by_entropy = [row.entropy for row in sort_rows(stats, Column.ENTROPY)]
    assert by_entropy == sorted(by_entropy, reverse=True)
    backwards = [row.entropy for row in sort_rows(stats, Column.ENTROPY, reverse=True)]
    assert backwards == sorted(by_entropy)
    assert [(row.layer, row.head) for row in sort_rows(stats, Column.LAYER)][:2] == [(0, 0), (0, 1)]


def test_top_keys_are_the_heaviest_in_order():
    weights = np.array([[0.6, 0.4, 0.0], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])[None, None]
    blocks = top_keys(hand_made(weights, ["attention", "is", "cool"]), 2)
    rows = blocks[0]["queries"]
    assert [pick["token"] for pick in rows[0]["top"]] == ["attention", "is"]
    assert [pick["weight"] for pick in rows[1]["top"]] == pytest.approx([0.7, 0.2])
    assert [pick["index"] for pick in rows[2]["top"]] == [2, 0]  # a tie keeps the earlier key


def test_top_keys_leave_out_what_a_query_cannot_see():
    maps = attnviz.extract("the man walked the dog", mode="masked", layers=0, heads=0)
    rows = top_keys(maps, 3)[0]["queries"]
    assert [len(row["top"]) for row in rows] == [1, 2, 3, 3, 3]
    assert all(
        pick["index"] <= position for position, row in enumerate(rows) for pick in row["top"]
    )


def test_diff_of_identical_maps_is_zero_and_of_others_positive():
    maps = attnviz.extract("the man walked the dog")
    assert all(row.divergence == 0 for row in diff_maps(maps, maps))
    other = attnviz.extract("the man walked the dog", config=attnviz.builtin.BuiltinConfig(seed=1))
    rows = diff_maps(maps, other)
    assert all(row.divergence > 0 for row in rows)
    assert [row.divergence for row in rows] == sorted(
        (row.divergence for row in rows), reverse=True
    )


def test_jensen_shannon_bounds():
    p = np.array([1.0, 0.0])
    q = np.array([0.0, 1.0])
    assert jensen_shannon(p, q) == pytest.approx(math.log(2))
    assert jensen_shannon(p, p) == pytest.approx(0.0)


def test_diff_refuses_different_tokens():
    with pytest.raises(UsageError, match="different query tokens"):
        diff_maps(attnviz.extract("a b c"), attnviz.extract("a b d"))


def test_diff_of_different_layers_says_which_each_side_holds():
    first = attnviz.extract("a b c", layers=[0, 1], heads=[0, 1])
    second = attnviz.extract("a b c", layers=[1, 0], heads=[0, 1])  # the same shape
    expected = r"\(layers 0,1 × heads 0,1 and layers 1,0 × heads 0,1\)"
    with pytest.raises(UsageError, match=expected):
        diff_maps(first, second)


def test_notebook_html_needs_no_network():
    page = attnviz.extract("a <b> c", layers=0, heads=0)._repr_html_()
    assert page.startswith("<iframe srcdoc=") and "://" not in page
    assert "<script" not in page  # the whole page sits escaped inside srcdoc


def test_rollout_folds_layers_in_model_order_whatever_order_was_typed():
    maps = attnviz.extract("the cat sat on the mat")
    forwards = aggregate(maps.select(layers=[0, 1]), Aggregate.ROLLOUT)
    backwards = aggregate(maps.select(layers=[1, 0]), Aggregate.ROLLOUT)
    np.testing.assert_array_equal(forwards.weights, backwards.weights)
