"""The k most attended key tokens of every query token."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.panels import panels_of

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


def top_keys(maps: AttentionMaps, k: int) -> list[dict[str, Any]]:
    """Per map: each query token with its k heaviest keys, heaviest first (ties: earlier
    key). A key the query gives no weight (masked: a later token) is not one it attends
    to, so a query may have fewer than k."""
    blocks = []
    for panel in panels_of(maps):
        queries = []
        for query, row in zip(maps.query_tokens, panel.matrix, strict=True):
            order = [i for i in np.argsort(-row, kind="stable")[:k] if row[i] > 0]
            top = [
                {"token": maps.key_tokens[i], "index": int(i), "weight": float(row[i])}
                for i in order
            ]
            queries.append({"token": query, "top": top})
        block = {"title": panel.title, "layer": panel.layer, "head": panel.head}
        blocks.append({**block, "queries": queries})
    return blocks
