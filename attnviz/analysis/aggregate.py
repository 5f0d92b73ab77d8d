"""Combining maps: mean or max over heads, attention rollout and attention flow.

Rollout and flow follow Abnar & Zuidema (2020), "Quantifying Attention Flow in
Transformers": each layer's map is the mean over its heads, with the residual
connection folded in as 0.5·A + 0.5·I (rows renormalised). Rollout multiplies
these maps from the last layer down to the first; flow treats them as the
capacities of a layered graph and takes, for every (query, key) pair, the
maximum flow from the query at the top to the key at the bottom.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import Aggregate, Mode, chosen
from attnviz.errors import UsageError

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps

# Flow solves one maximum-flow problem per (query, key) pair on a graph of
# (layers + 1) x tokens nodes: 64 tokens of a 6-layer model take seconds, and
# the time grows with the fourth power of the length.
FLOW_MAX_TOKENS = 64


def with_residual(attention: np.ndarray) -> np.ndarray:
    """0.5·A + 0.5·I with rows renormalised: the residual connection as attention to self."""
    mixed = 0.5 * attention + 0.5 * np.eye(attention.shape[-1], dtype=attention.dtype)
    return mixed / mixed.sum(-1, keepdims=True)


def rollout(per_layer: np.ndarray) -> np.ndarray:
    """per_layer (L, T, T), head-averaged and in layer order -> (T, T): Ã_L · … · Ã_1."""
    result = np.eye(per_layer.shape[-1], dtype=np.float64)
    for attention in per_layer.astype(np.float64):
        result = with_residual(attention) @ result
    return result


# scipy's maximum flow works on integers: capacities are weights in millionths.
_FLOW_UNITS = 1_000_000


def flow(per_layer: np.ndarray) -> np.ndarray:
    """per_layer (L, T, T) -> (T, T): max flow from each top query to each bottom key, rows
    normalised. Node l·T + i is token i after l layers; edges run from layer l + 1 down to l."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    layers, tokens, _ = per_layer.shape
    nodes = (layers + 1) * tokens
    rows, columns, capacities = [], [], []
    for layer, attention in enumerate(per_layer.astype(np.float64)):
        mixed = np.rint(with_residual(attention) * _FLOW_UNITS).astype(np.int32)
        linked_queries, linked_keys = np.nonzero(mixed)
        rows.append((layer + 1) * tokens + linked_queries)
        columns.append(layer * tokens + linked_keys)
        capacities.append(mixed[linked_queries, linked_keys])
    graph = csr_matrix(
        (np.concatenate(capacities), (np.concatenate(rows), np.concatenate(columns))),
        shape=(nodes, nodes),
    )
    result = np.zeros((tokens, tokens))
    for query in range(tokens):
        for key in range(tokens):
            result[query, key] = maximum_flow(graph, layers * tokens + query, key).flow_value
    return result / result.sum(-1, keepdims=True)


def aggregate(maps: AttentionMaps, method: Aggregate | str) -> AttentionMaps:
    """Combine the maps held: the result has one map per layer, or one in all."""
    method = chosen(Aggregate, method, "aggregate")
    if maps.aggregate is not None:
        raise UsageError(f"these maps are already an aggregate ({maps.aggregate.description})")
    weights = maps.weights.astype(np.float64)  # (L, H, T, S)
    if method is Aggregate.MEAN:
        combined = weights.mean(1, keepdims=True)
    elif method is Aggregate.MAX:
        combined = weights.max(1, keepdims=True)
    elif method is Aggregate.MEAN_ALL:
        combined = weights.mean((0, 1), keepdims=True)
    elif method is Aggregate.MAX_ALL:
        combined = weights.max((0, 1), keepdims=True)
    else:
        refused = unchainable(maps, method)
        if refused is not None:
            raise UsageError(refused)
        tokens = len(maps.key_tokens)
        if method is Aggregate.FLOW and tokens > FLOW_MAX_TOKENS:
            raise UsageError(
                f"flow solves a maximum-flow problem for each of the {tokens}² token pairs; it is "
                f"limited to {FLOW_MAX_TOKENS} tokens (this text has {tokens}): use rollout"
            )
        # Layers chain bottom to top: fold them in model order, whatever order was typed.
        per_layer = weights.mean(1)[np.argsort(maps.layers, kind="stable")]  # (L, T, T)
        combined = (rollout if method is Aggregate.ROLLOUT else flow)(per_layer)[None, None]
    return maps.replace(weights=combined.astype(np.float32), aggregate=method)


CHAINED = frozenset({Aggregate.ROLLOUT, Aggregate.FLOW})  # layer after layer, as the model reads


def unchainable(maps: AttentionMaps, method: Aggregate = Aggregate.ROLLOUT) -> str | None:
    """Why ``method`` (rollout, flow), which chains a layer's queries to the next layer's
    keys, cannot be made from these maps; None where it can."""
    if maps.mode is Mode.CROSS:
        return f"{_chains(method)} self or masked attention, not cross"
    if maps.weighting is not None:
        return f"{_chains(method)} rows that sum to 1, not value-weighted maps"
    if not maps.one_sequence or maps.query_positions is not None:
        held = "chosen rows" if maps.one_sequence else "one sentence's rows over the other's"
        return rows_refused(method, f"these maps hold {held}")
    if maps.pooled is not None:  # the chain of bins is not the binned chain
        return rows_refused(method, "these maps hold pooled bins")
    return None


def rows_refused(method: Aggregate, held: str) -> str:
    """What ``method`` says of maps that hold less than every token's row (``held``)."""
    return f"{_chains(method)} every token's row over every token; {held}"


def _chains(method: Aggregate) -> str:
    return f"{method.value} chains a layer's queries to the next layer's keys, so it needs"
