"""Comparing two sets of maps of the same input: per-head Jensen–Shannon divergence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnviz.errors import UsageError
from attnviz.panels import panels_of
from attnviz.selection import index_span

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


@dataclass(frozen=True)
class HeadDivergence:
    layer: int | None  # None: combined over layers (an aggregate)
    head: int | None  # None: combined over heads
    divergence: float  # Jensen–Shannon, in nats, averaged over query rows; 0 = identical
    worst_query: str  # the query token whose rows differ most


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """JS divergence (nats) between matching rows of p and q, over the last axis; in [0, ln 2]."""
    p, q = p.astype(np.float64), q.astype(np.float64)
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> np.ndarray:
        ratio = np.divide(a, m, out=np.ones_like(a), where=a > 0)
        return (a * np.log(ratio)).sum(-1)

    return np.clip(0.5 * kl(p) + 0.5 * kl(q), 0.0, None)


def diff_maps(first: AttentionMaps, second: AttentionMaps) -> list[HeadDivergence]:
    """Divergence of every head both hold, largest first. The inputs must have the same tokens."""
    for side in ("query_tokens", "key_tokens"):
        a, b = getattr(first, side), getattr(second, side)
        if a != b:
            pairs = enumerate(zip(a, b, strict=False))
            where = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
            raise UsageError(
                f"the two inputs have different {side.replace('_', ' ')} ({len(a)} and {len(b)}; "
                f"first difference at position {where}): a diff needs the same tokens, e.g. two "
                "checkpoints of one model"
            )
    if first.query_positions != second.query_positions:
        raise UsageError(
            f"the two inputs hold different query rows ({_rows(first)} and {_rows(second)}): "
            "a diff compares the same rows of two runs (give both the same --rows)"
        )
    if (first.pooled, first.between) != (second.pooled, second.between):
        raise UsageError(
            "the two inputs are not the same view of their maps (pooled bins or the "
            "sentences of a pair): make both the same way"
        )
    if first.weighting is not None or second.weighting is not None:
        raise UsageError(
            "a diff compares the rows of two maps as distributions, and value-weighted maps "
            "are not: diff the maps without --weigh"
        )
    if first.aggregate != second.aggregate:
        raise UsageError("one side is aggregated and the other is not")
    if (first.layers, first.heads) != (second.layers, second.heads):
        raise UsageError(
            f"the two sides hold different layers and heads ({_grid(first)} and "
            f"{_grid(second)}): select the same ones with --layer and --head"
        )
    rows = []
    for panel, other in zip(panels_of(first), panels_of(second), strict=True):
        per_row = jensen_shannon(panel.matrix, other.matrix)
        rows.append(
            HeadDivergence(
                layer=panel.layer,
                head=panel.head,
                divergence=float(per_row.mean()),
                worst_query=first.query_tokens[int(per_row.argmax())],
            )
        )
    return sorted(rows, key=lambda row: -row.divergence)


def _rows(maps: AttentionMaps) -> str:
    positions = maps.query_positions
    return "every row" if positions is None else f"rows {index_span(positions)}"


def _grid(maps: AttentionMaps) -> str:
    return f"layers {index_span(maps.layers)} × heads {index_span(maps.heads)}"
