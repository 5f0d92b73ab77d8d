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
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from attnviz.selection import Selection, resolve


class Product(Protocol):
    """Takes blocks of rows of each head's weights; ``result()`` is (H, rows kept, columns)."""

    def add(self, head: int, start: int, block: np.ndarray) -> None: ...

    def wanted(self, start: int, stop: int) -> bool: ...

    def result(self) -> np.ndarray: ...


class WholeMaps:
    def __init__(self, heads: int, queries: int, keys: int) -> None:
        self.weights = np.zeros((heads, queries, keys), dtype=np.float32)  # (H, T, S)

    def wanted(self, start: int, stop: int) -> bool:
        return True

    def add(self, head: int, start: int, block: np.ndarray) -> None:
        self.weights[head, start : start + len(block)] = block

    def result(self) -> np.ndarray:
        return self.weights


class ChosenRows:
    def __init__(self, heads: int, positions: Sequence[int], keys: int) -> None:
        self.positions = np.asarray(positions, dtype=np.int64)  # ascending
        self.weights = np.zeros((heads, len(positions), keys), dtype=np.float32)  # (H, P, S)

    def _inside(self, start: int, stop: int) -> tuple[int, int]:
        return (
            int(np.searchsorted(self.positions, start)),
            int(np.searchsorted(self.positions, stop)),
        )

    def wanted(self, start: int, stop: int) -> bool:
        first, last = self._inside(start, stop)
        return last > first

    def add(self, head: int, start: int, block: np.ndarray) -> None:
        first, last = self._inside(start, start + len(block))
        self.weights[head, first:last] = block[self.positions[first:last] - start]

    def result(self) -> np.ndarray:
        return self.weights


class PooledMaps:
    """Bins of ``factor`` neighbouring tokens: a bin's row is the mean of its query rows,
    its column the sum of its key columns."""

    def __init__(self, heads: int, queries: int, keys: int, factor: int) -> None:
        self.factor = factor
        self.queries = queries
        self.column_starts = np.arange(0, keys, factor)
        bins = math.ceil(queries / factor), len(self.column_starts)
        self.sums = np.zeros((heads, *bins), dtype=np.float64)  # (H, T/factor, S/factor)

    def wanted(self, start: int, stop: int) -> bool:
        return True

    def add(self, head: int, start: int, block: np.ndarray) -> None:
        columns = np.add.reduceat(block.astype(np.float64), self.column_starts, axis=1)
        bins = (start + np.arange(len(block))) // self.factor
        np.add.at(self.sums[head], bins, columns)

    def result(self) -> np.ndarray:
        starts = np.arange(0, self.queries, self.factor)
        counts = np.diff(np.append(starts, self.queries)).reshape(-1, 1)
        return (self.sums / counts).astype(np.float32)


def pool_factor(queries: int, keys: int, bins: int) -> int:
    """Tokens per bin so that maps of ``queries`` × ``keys`` become at most ``bins`` × ``bins``."""
    return max(1, math.ceil(max(queries, keys) / bins))


def of_whole(product: Product, weights: np.ndarray) -> np.ndarray:
    """A product of whole (H, T, S) maps: the reference the block-wise products equal."""
    for head, matrix in enumerate(weights):
        product.add(head, 0, matrix)
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
