"""Operations on the token grid of attention maps, on plain arrays: pool neighbouring
tokens, group pieces into words, keep some rows and columns, and tell whether
numbers are attention at all.

Every operation keeps what makes a map attention: each row still sums to 1
(rows are averaged, columns summed; kept columns are renormalised). This module
imports numpy and the vocabulary alone, so that the data types, the extractors
and the renderers can all build on it.

Shape letters: T query tokens (rows), S key tokens (columns); ``…`` any leading axes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from attnviz.choices import Mode


def pool_map(matrix: np.ndarray, factor: int) -> np.ndarray:
    """(T, S) -> (⌈T/factor⌉, ⌈S/factor⌉): ``factor`` neighbouring tokens pooled, rows by
    mean, columns by sum, so rows still sum to 1."""
    if factor == 1:
        return matrix
    rows, columns = matrix.shape
    row_groups = np.arange(0, rows, factor)
    column_groups = np.arange(0, columns, factor)
    summed = np.add.reduceat(np.add.reduceat(matrix, row_groups, axis=0), column_groups, axis=1)
    counts = np.diff(np.append(row_groups, rows)).reshape(-1, 1)
    return summed / counts


def pool_labels(labels: Sequence[str], factor: int) -> list[str]:
    """The label of a pooled group is its first token's, marked with ``+`` for the rest."""
    if factor == 1:
        return list(labels)
    return [
        labels[start] + ("+" if start + 1 < len(labels) else "")
        for start in range(0, len(labels), factor)
    ]


def group(
    weights: np.ndarray, query_groups: list[list[int]], key_groups: list[list[int]]
) -> np.ndarray:
    """(…, T, S) -> (…, groups_T, groups_S): the mean over a group's rows, the sum over
    its columns (sub-word pieces merged into words), so every row still sums to 1."""
    summed = np.stack([weights[..., members].sum(-1) for members in key_groups], axis=-1)
    return np.stack([summed[..., members, :].mean(-2) for members in query_groups], axis=-2)


def keep(weights: np.ndarray, rows: Sequence[int] | slice, columns: Sequence[int] | slice):
    """(…, T, S) -> only the kept rows and columns, each row renormalised to sum to 1 over
    the columns kept (a row that kept no weight stays 0)."""
    kept = weights[..., rows, :][..., columns]
    totals = kept.sum(-1, keepdims=True)
    return np.divide(kept, totals, out=np.zeros_like(kept), where=totals > 0)


def row_error(weights: np.ndarray) -> float:
    """How far the rows of (…, T, S) weights are from summing to 1 (NaN-proof: inf)."""
    sums = weights.sum(-1, dtype=np.float64)  # NaN or inf anywhere makes its row's sum so
    if not np.all(np.isfinite(sums)):
        return math.inf
    return float(np.abs(sums - 1).max(initial=0))


_LOOKAHEAD_ROWS = 256  # rows checked at a time: no mask the size of a long input's maps


def lookahead(weights: np.ndarray, positions: Sequence[int] | None = None) -> float:
    """The largest weight a query gives a later token: in square (…, T, T) maps, or in
    chosen rows (…, R, S) whose query ``positions`` are given."""
    rows = np.arange(weights.shape[-2]) if positions is None else np.asarray(positions)
    worst = 0.0
    for start in range(0, len(rows), _LOOKAHEAD_ROWS):
        chosen = rows[start : start + _LOOKAHEAD_ROWS]
        first = int(chosen.min(initial=0)) + 1  # no earlier key can be later than a row
        block = weights[..., start : start + len(chosen), first:]
        later = np.arange(first, weights.shape[-1])[None, :] > chosen[:, None]
        worst = max(worst, float(np.abs(block[..., later]).max(initial=0)))
    return worst


def attention_problem(
    weights: np.ndarray,
    *,
    causal: bool,
    tolerance: float,
    distributions: bool = True,
    positions: Sequence[int] | None = None,
    weighted: bool = False,
) -> str | None:
    """What makes (…, T, S) numbers not attention, in words, or None when they are:
    finite, in [0, 1], rows summing to 1 (``distributions``; a max over heads is not)
    within ``tolerance``, and no weight on a later token when ``causal`` and square or
    of rows at known query ``positions`` (within 1e-6: a masked weight is exactly 0 in
    any precision). ``weighted`` numbers (weights times value norms) may exceed 1."""
    if not math.isfinite(float(weights.sum(dtype=np.float64))):  # NaN and inf make it so
        return "weights hold NaN or infinite values: these are not attention"
    if weighted and weights.size and weights.min() < 0:
        return f"value-weighted maps hold {weights.min():.3g}; they are 0 or more"
    if not weighted and weights.size and (weights.min() < 0 or weights.max() > 1 + 1e-6):
        return (
            f"weights run from {weights.min():.3g} to {weights.max():.3g}; attention weights "
            "lie between 0 and 1"
        )
    if distributions and (worst := row_error(weights)) > tolerance:
        return f"rows of the weights do not sum to 1 (off by up to {worst:.3g})"
    square = weights.shape[-1] == weights.shape[-2]
    if causal and (square or positions is not None) and lookahead(weights, positions) > 1e-6:
        return "masked (causal) maps give weight to later tokens"
    return None


def one_sequence(mode: Mode, between: str | None) -> bool:
    """Queries and keys are one sequence of tokens, a query's position a key's: not cross
    attention, nor one sentence's rows over the other's columns (a-b, b-a). Distance,
    previous, self and the detectors mean something only then."""
    return mode is not Mode.CROSS and (between is None or between[0] == between[-1])
