"""What is kept of attention maps that are made one block of query rows at a time.

A long input's whole T×T maps need not exist: each product takes the blocks of
one head's exact weights as they are computed, keeps what it was asked for and
lets the block go. The same products applied to whole maps (one block holding
every row) give the same numbers, which is how they are tested.

- :class:`WholeMaps`: every row, as today.
- :class:`ChosenRows`: some query rows over every key (what the last token reads).
- :class:`PooledMaps`: neighbouring tokens pooled into bins, rows averaged and
  columns summed, so that every row still sums to 1 (as :func:`grid.pool_map`).

Shape letters: H heads, T query tokens, S key tokens, R rows of a block.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from attnviz.selection import Selection, resolve


class Product(Protocol):
    """Takes blocks of query rows of each head's weights, in the order ``blocks`` gives
    them; ``result()`` is (H, rows kept, columns kept)."""

    def blocks(self, queries: int, step: int) -> Iterator[np.ndarray]: ...

    def add(self, head: int, rows: np.ndarray, block: np.ndarray) -> None: ...

    def result(self) -> np.ndarray: ...


def _runs(queries: int, step: int) -> Iterator[np.ndarray]:
    """Every query position, ``step`` at a time."""
    for start in range(0, queries, step):
        yield np.arange(start, min(start + step, queries))


class WholeMaps:
    def __init__(self, heads: int, queries: int, keys: int) -> None:
        self.weights = np.zeros((heads, queries, keys), dtype=np.float32)  # (H, T, S)

    def blocks(self, queries: int, step: int) -> Iterator[np.ndarray]:
        return _runs(queries, step)

    def add(self, head: int, rows: np.ndarray, block: np.ndarray) -> None:
        self.weights[head, rows] = block

    def result(self) -> np.ndarray:
        return self.weights


class ChosenRows:
    """Only the rows at ``positions`` are computed at all."""

    def __init__(self, heads: int, positions: Sequence[int], keys: int) -> None:
        self.positions = np.asarray(positions, dtype=np.int64)  # ascending
        self.weights = np.zeros((heads, len(positions), keys), dtype=np.float32)  # (H, P, S)
        self._slot = {int(position): slot for slot, position in enumerate(self.positions)}

    def blocks(self, queries: int, step: int) -> Iterator[np.ndarray]:
        for start in range(0, len(self.positions), step):
            yield self.positions[start : start + step]

    def add(self, head: int, rows: np.ndarray, block: np.ndarray) -> None:
        self.weights[head, [self._slot[int(row)] for row in rows]] = block

    def result(self) -> np.ndarray:
        return self.weights


class PooledMaps:
    """Bins of ``factor`` neighbouring tokens: a bin's row is the mean of its query rows,
    its column the sum of its key columns."""

    def __init__(self, heads: int, queries: int, keys: int, factor: int) -> None:
        self.factor = factor
        self.queries = queries
        self.keys = keys
        shape = (heads, math.ceil(queries / factor), math.ceil(keys / factor))
        self.sums = np.zeros(shape, dtype=np.float64)  # (H, T/factor, S/factor)

    def blocks(self, queries: int, step: int) -> Iterator[np.ndarray]:
        # Whole bins to a block (where a block holds one), so that each bin is summed once.
        return _runs(queries, max(self.factor, step - step % self.factor))

    def add(self, head: int, rows: np.ndarray, block: np.ndarray) -> None:
        factor, whole = self.factor, self.keys - self.keys % self.factor
        columns = block[:, :whole].reshape(len(block), -1, factor).sum(-1)  # (R, S // factor)
        if whole < self.keys:  # the last bin holds the columns left over
            columns = np.concatenate([columns, block[:, whole:].sum(-1, keepdims=True)], axis=1)
        bins = rows // factor
        starts = np.flatnonzero(np.diff(bins, prepend=-1))
        self.sums[head, bins[starts]] += np.add.reduceat(columns, starts, axis=0)

    def result(self) -> np.ndarray:
        starts = np.arange(0, self.queries, self.factor)
        counts = np.diff(np.append(starts, self.queries)).reshape(-1, 1)
        return (self.sums / counts).astype(np.float32)


def pool_factor(queries: int, keys: int, bins: int) -> int:
    """Tokens per bin so that maps of ``queries`` × ``keys`` become at most ``bins`` × ``bins``."""
    return max(1, math.ceil(max(queries, keys) / bins))


def keeps_everything(rows: Selection, pool: int | None, queries: int, keys: int) -> bool:
    """True when the product asked for is the whole maps (no rows chosen, and bins of one
    token: an input shorter than the bins asked for)."""
    return rows is None and (pool is None or pool_factor(queries, keys, pool) == 1)


def of_whole(product: Product, weights: np.ndarray) -> np.ndarray:
    """A product of whole (H, T, S) maps: the reference the block-wise products equal."""
    queries = weights.shape[1]
    for head, matrix in enumerate(weights):
        for rows in product.blocks(queries, queries):
            product.add(head, rows, matrix[rows])
    return product.result()


def row_positions(rows: Selection, queries: int) -> list[int]:
    """The query positions a ``--rows`` selection names, ascending."""
    return sorted(resolve(rows, queries, "row"))


def product_for(rows: Selection, pool: int | None, heads: int, queries: int, keys: int) -> Product:
    """The product a request asks for: chosen rows, maps pooled into at most ``pool`` ×
    ``pool`` bins, or whole maps."""
    if rows is not None:
        return ChosenRows(heads, row_positions(rows, queries), keys)
    if pool is not None:
        return PooledMaps(heads, queries, keys, pool_factor(queries, keys, pool))
    return WholeMaps(heads, queries, keys)


def product_tokens(
    rows: Selection, pool: int | None, queries: Sequence[Any], keys: Sequence[Any]
) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """What labels the rows and columns of a product (tokens or special flags alike: a bin
    takes its first token's), and the fields that tell maps which product they hold."""
    if rows is not None:
        positions = row_positions(rows, len(queries))
        return [queries[p] for p in positions], list(keys), {"query_positions": positions}
    if pool is not None:
        factor = pool_factor(len(queries), len(keys), pool)
        if factor > 1:
            return list(queries[::factor]), list(keys[::factor]), {"pooled": factor}
    return list(queries), list(keys), {}
