"""What is kept of attention maps that are made one block of query rows at a time.

A long input's whole T×T maps need not exist: each product takes the blocks of
one head's exact weights as they are computed, keeps what it was asked for and
lets the block go. The same products applied to whole maps (one block holding
every row) give the same numbers, which is how they are tested.

- :class:`WholeMaps`: every row, as today.
- :class:`ChosenRows`: some query rows over every key (what the last token reads).
- :class:`PooledMaps`: neighbouring tokens pooled into bins, rows averaged and
  columns summed, so that every row still sums to 1 (as :func:`grid.pool_map`).

- :class:`HeadStatisticsProduct`: each head's statistics, summed row by row.

Blocks are PyTorch tensors on the model's device where a model makes them, or
NumPy arrays where whole maps are cut into blocks; each product takes its
block in the form it computes with (statistics in PyTorch, on the device).

Shape letters: H heads, T query tokens, S key tokens, R rows of a block, W the
keys a block holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from attnviz.head_columns import SUMMED, Needs, Per
from attnviz.selection import Selection, resolve

# Where each summed statistic's total sits in a head's sums: arithmetic by name.
SLOT = {column.value: slot for slot, column in enumerate(SUMMED)}

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Block:
    """The exact weights of some query rows of one head. ``weights`` may hold only the
    first W ≤ S keys: the weights of the rest are 0 (causal rows, before a later key).
    ``logs``, where the maker has them, are the log weights, finite everywhere (a
    weight of 0 has a log far below any other), so that ``weights · logs`` is exact.
    A block may also leave out its first ``start`` keys, which none of its rows reads
    (behind a sliding window): ``weights`` and ``logs`` are then (R, W − start), and
    ``tensor()`` and ``array()`` give them every key."""

    rows: np.ndarray  # (R,) query positions, ascending
    weights: Any  # (R, W − start): a torch.Tensor or an np.ndarray
    logs: Any = None  # (R, W − start) torch.Tensor, or None
    start: int = 0  # the first key held; those before have weight 0

    @property
    def width(self) -> int:
        return self.start + self.weights.shape[1]

    def array(self) -> np.ndarray:
        """The weights of every key as a NumPy array, on the CPU."""
        if isinstance(self.weights, np.ndarray) and not self.start:
            return self.weights
        return self.tensor().cpu().numpy()

    def tensor(self) -> torch.Tensor:
        """The weights of every key as a PyTorch tensor, where they were made."""
        return _widened(self.held_tensor(), self.start, 0.0)

    def held_tensor(self) -> torch.Tensor:
        """The weights of the keys held, (R, W − start)."""
        import torch

        return torch.as_tensor(self.weights)

    def held_log_tensor(self) -> torch.Tensor:
        """The log weights of the keys held, (R, W − start)."""
        import torch

        if self.logs is not None:
            return self.logs
        weights = self.held_tensor()
        return torch.log(weights).clamp_(min=torch.finfo(weights.dtype).min)


def _widened(held: torch.Tensor, start: int, hidden: float) -> torch.Tensor:
    """(R, W − start) -> (R, W): the ``start`` keys not held first, each ``hidden``."""
    if not start:
        return held
    whole = held.new_full((held.shape[0], start + held.shape[1]), hidden)
    whole[:, start:] = held
    return whole


class Product(Protocol):
    """Takes blocks of query rows of each head's weights, in the order ``blocks`` gives
    them; ``result()`` is (H, rows kept, columns kept)."""

    def blocks(self, queries: int, step: int) -> Iterator[np.ndarray]: ...

    def add(self, head: int, block: Block) -> None: ...

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

    def add(self, head: int, block: Block) -> None:
        self.weights[head, block.rows, : block.width] = block.array()

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

    def add(self, head: int, block: Block) -> None:
        slots = [self._slot[int(row)] for row in block.rows]
        self.weights[head, slots, : block.width] = block.array()

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

    def add(self, head: int, block: Block) -> None:
        factor, width, weights = self.factor, block.width, block.array()
        whole = width - width % factor
        columns = weights[:, :whole].reshape(len(weights), -1, factor).sum(-1)  # (R, W/factor)
        if whole < width:  # a last bin, of the columns left over
            columns = np.concatenate([columns, weights[:, whole:].sum(-1, keepdims=True)], axis=1)
        bins = block.rows // factor
        starts = np.flatnonzero(np.diff(bins, prepend=-1))
        summed = np.add.reduceat(columns, starts, axis=0)
        self.sums[head, bins[starts], : summed.shape[1]] += summed

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
            product.add(head, Block(rows, matrix[rows]))
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


def product_labels(
    rows: Selection,
    pool: int | None,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    query_special: Sequence[bool] | None,
    key_special: Sequence[bool] | None,
) -> dict[str, Any]:
    """The AttentionMaps fields that label a product's rows and columns (a bin takes its
    first token's label and flag), and the field that tells which product they hold."""
    queries, keys = len(query_tokens), len(key_tokens)
    pick_rows: Sequence[int]
    pick_columns: Sequence[int]
    if rows is not None:
        positions = row_positions(rows, queries)
        pick_rows, pick_columns = positions, range(keys)
        fields: dict[str, Any] = {"query_positions": positions}
    elif pool is not None and (factor := pool_factor(queries, keys, pool)) > 1:
        pick_rows, pick_columns = range(0, queries, factor), range(0, keys, factor)
        fields = {"pooled": factor}
    else:
        pick_rows, pick_columns, fields = range(queries), range(keys), {}
    for side, picked, tokens, special in (
        ("query", pick_rows, query_tokens, query_special),
        ("key", pick_columns, key_tokens, key_special),
    ):
        fields[f"{side}_tokens"] = [tokens[i] for i in picked]
        fields[f"{side}_special"] = None if special is None else [special[i] for i in picked]
    return fields


class Repeats:
    """Where each token of an input occurred before: the duplicate-token and induction
    patterns of the head detectors, summed over a block's weights.

    For row i the pattern keys are the earlier positions p < i holding i's token
    (duplicate: key p; induction: key p + 1, the token that followed it). They are
    found through the positions sorted by token, so a block costs as many steps as it
    has such pairs; where a block has many (a text of few distinct tokens), two dense
    masks over the block cost less."""

    DENSE_SHARE = 8  # dense masks once the pairs exceed 1/8 of a block's weights

    def __init__(self, tokens: Sequence[str]) -> None:
        codes = np.unique(list(tokens), return_inverse=True)[1].reshape(-1)  # (S,)
        order = np.lexsort((np.arange(len(codes)), codes))  # by token, then position
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        start = np.searchsorted(codes[order], codes)  # where i's token begins in ``order``
        self._arrays = {"codes": codes, "order": order, "start": start, "earlier": rank - start}
        self._on: dict[str, torch.Tensor] = {}  # the arrays on the blocks' device
        self._pairs: tuple[tuple[int, ...], Any] | None = None  # the last block's

    def detected(self, weights: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """The weight of a block's rows (R, W) on the keys of the duplicate-token pattern
        (leaving out the first key) and of the induction pattern, (2,)."""
        import torch

        if not self._on:
            self._on = {name: torch.as_tensor(array, device=weights.device)
                        for name, array in self._arrays.items()}  # fmt: skip
        rows_on = torch.as_tensor(rows, device=weights.device)
        pairs = self._pairs_of(rows_on, weights.shape[1])
        if pairs is None:
            return self._dense(weights, rows_on)
        indices, duplicates = pairs
        picked = weights.reshape(-1).take(indices)  # one gather for both patterns
        return torch.stack([picked[:duplicates].sum(), picked[duplicates:].sum()])

    def _pairs_of(self, rows: torch.Tensor, width: int) -> Any:
        """The flat indices, in a block of ``width`` keys, of the duplicate-token pattern's
        weights (first) and the induction pattern's, and how many are the first; the same
        for every head of the block (kept); None when dense masks cost less."""
        import torch

        key = (int(rows[0]), int(rows[-1]), len(rows), width)
        if self._pairs is not None and self._pairs[0] == key:
            return self._pairs[1]
        counts = self._on["earlier"][rows]  # (R,)
        total = int(counts.sum())
        pairs = None
        if total * self.DENSE_SHARE <= len(rows) * width:
            device = rows.device
            slots = torch.repeat_interleave(torch.arange(len(rows), device=device), counts)
            within = torch.arange(total, device=device) - torch.repeat_interleave(
                torch.cumsum(counts, 0) - counts, counts
            )
            keys = self._on["order"][self._on["start"][rows][slots] + within]  # p < i
            flat = slots * width + keys
            duplicate = flat[keys >= 1]  # the first key left out
            pairs = (torch.cat([duplicate, flat + 1]), len(duplicate))  # induction: key p + 1
        self._pairs = (key, pairs)
        return pairs

    def _dense(self, weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        import torch

        codes, width = self._on["codes"], weights.shape[1]
        row_codes = codes[rows][:, None]  # (R, 1)
        keys = torch.arange(width, device=weights.device)[None, :]  # (1, W)
        earlier = keys < rows[:, None]
        duplicate = (codes[None, :width] == row_codes) & earlier & (keys >= 1)
        previous = torch.cat([codes.new_full((1,), -1), codes[: width - 1]])  # codes of j − 1
        induction = (previous[None, :] == row_codes) & (keys <= rows[:, None])
        flat = weights.reshape(-1)
        masks = (duplicate, induction)
        return torch.stack([torch.vdot(flat, mask.reshape(-1).to(flat.dtype)) for mask in masks])


class HeadStatisticsProduct:
    """Each head's statistics, summed row by row as the blocks pass: the one definition of
    what ``heads`` and ``stats`` list. ``result()`` is (H, len(SUMMED) + S): the mean of
    each summed column of :class:`~attnviz.head_columns.HeadColumn`, in its order (NaN where
    a statistic does not apply), then the weight each key received, summed over the rows.
    A statistic is summed here by its name and finished by its declaration (``per``,
    ``needs``).

    ``rows`` are the query positions read (None: every one); ``span`` the keys whose
    weight the span statistic sums (None: no span); ``tokens`` the keys' tokens, which
    say which tokens repeat (the detectors' patterns; None: no detectors). Computed in
    PyTorch where the block was made (the model's device), from the block's log weights:
    a row's entropy is −Σ p·log p without a logarithm per weight.

    The detector scores are TransformerLens's ``detect_head`` scores (error measure
    "mul", ``exclude_bos=True``): the weight the rows put where the detector's pattern
    is 1, over all the weight they put on keys after the first. Patterns: previous_token,
    key i−1 of row i; duplicate_token, an earlier key with row i's token; induction, a
    key j ≤ i whose previous token (j−1) is row i's token."""

    def __init__(
        self,
        heads: int,
        queries: int,
        keys: int,
        sink_columns: Sequence[int],
        aligned: bool,
        causal: bool = False,
        rows: Sequence[int] | None = None,
        span: Sequence[int] | None = None,
        tokens: Sequence[str] | None = None,
    ) -> None:
        self.heads = heads
        self.queries = queries
        self.keys = keys
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64)  # ascending
        self.sink_columns = np.asarray(sink_columns, dtype=np.int64)
        self.span = None if span is None else np.asarray(span, dtype=np.int64)
        self.aligned = aligned  # queries and keys are the same tokens (self and masked)
        self.causal = causal  # no weight on a key after the query (masked)
        # Where each token occurred before; None where the detectors do not apply.
        self.repeats = Repeats(tokens) if tokens and aligned else None
        self._sums: torch.Tensor | None = None  # (H, len(SUMMED)), on the first block's device
        self._columns: torch.Tensor | None = None  # (H, S)

    def blocks(self, queries: int, step: int) -> Iterator[np.ndarray]:
        if self.rows is None:
            return _runs(queries, step)
        return (self.rows[start : start + step] for start in range(0, len(self.rows), step))

    def add(self, head: int, block: Block) -> None:
        import torch

        # (R, W − start): the keys before start (behind a sliding window) have weight 0.
        weights, logs = block.held_tensor().float(), block.held_log_tensor().float()
        device, start, width = weights.device, block.start, block.width
        if self._sums is None or self._columns is None:
            # Totals over every block in float64 (float32 where the device has no float64).
            total = torch.float32 if device.type == "mps" else torch.float64
            self._sums = torch.zeros(self.heads, len(SUMMED), dtype=total, device=device)
            self._columns = torch.zeros(self.heads, self.keys, dtype=total, device=device)
        sums = self._sums[head]
        sums[SLOT["entropy"]] -= torch.vdot(weights.reshape(-1), logs.reshape(-1))
        sums[SLOT["sink"]] += self._mass(weights, self.sink_columns, start)
        if self.span is not None:
            sums[SLOT["span"]] += self._mass(weights, self.span, start)
        if self.aligned:
            self._add_positional(sums, weights, block)
        self._columns[head, start:width] += weights.sum(0)

    def _add_positional(self, sums: torch.Tensor, weights: torch.Tensor, block: Block) -> None:
        """The statistics that compare query and key positions or tokens, of one block
        whose held weights are ``weights`` (R, W − start)."""
        import torch

        device, start, width = weights.device, block.start, block.width
        rows = torch.as_tensor(block.rows, device=device)
        keys = torch.arange(start, width, dtype=weights.dtype, device=device)
        # Σ_j p_ij |i − j| = Σ_j p_ij (i − j) + 2 Σ_{j > i} p_ij (j − i); the second sum
        # is over the keys after the query, which causal rows give no weight.
        signed = weights.sum(1) @ rows.to(weights.dtype) - (weights @ keys).sum()
        if not self.causal:
            ahead = (keys[None, :] - rows[:, None].to(weights.dtype)).clamp_(min=0)
            signed = signed + 2 * torch.vdot(weights.reshape(-1), ahead.reshape(-1))
        sums[SLOT["distance"]] += signed
        slots = torch.arange(len(rows), device=device)
        inside = (rows >= start) & (rows < width)
        sums[SLOT["self"]] += weights[slots[inside], rows[inside] - start].sum()
        earlier = (rows - 1 >= start) & (rows >= 1) & (rows - 1 < width)
        # (rows with a previous key held,)
        before = weights[slots[earlier], rows[earlier] - 1 - start]
        sums[SLOT["previous"]] += before.sum()
        if self.repeats is not None:
            # The first key's weight left out.
            sums[SLOT["previous_token"]] += before[rows[earlier] >= 2].sum()
            # The patterns index every key: the block widened.
            every = block.tensor().float()
            duplicate, induction = self.repeats.detected(every, block.rows).to(sums.dtype)
            sums[SLOT["duplicate_token"]] += duplicate
            sums[SLOT["induction"]] += induction

    @staticmethod
    def _mass(weights: torch.Tensor, columns: np.ndarray, start: int) -> torch.Tensor:
        """The weight of the rows on some keys (those the block holds), summed."""
        import torch

        held = columns[(columns >= start) & (columns < start + weights.shape[1])] - start
        return weights[:, torch.as_tensor(held, device=weights.device)].sum()

    def result(self) -> np.ndarray:
        if self._sums is None or self._columns is None:
            raise ValueError("statistics of no rows: no block was added")
        sums = self._sums.cpu().double().numpy()
        columns = self._columns.cpu().double().numpy()
        rows = np.arange(self.queries) if self.rows is None else self.rows
        applies = {
            Needs.ANY: True,
            Needs.ONE_SEQUENCE: self.aligned,
            Needs.SPAN: self.span is not None,
            Needs.REPEATS: self.repeats is not None,
        }
        # Over the weight on every key but the first (TransformerLens's exclude_bos).
        after_first = len(rows) - columns[:, :1]  # (H, 1)
        denominators = {
            Per.ROW: np.full((self.heads, 1), float(len(rows))),
            Per.FOLLOWING_ROW: np.full((self.heads, 1), float(np.count_nonzero(rows >= 1))),
            Per.WEIGHT_AFTER_FIRST: after_first,
        }
        means = np.full_like(sums, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            for slot, column in enumerate(SUMMED):
                if column.per is not None and applies[column.needs]:
                    denominator = denominators[column.per][:, 0]
                    means[:, slot] = np.where(denominator > 0, sums[:, slot] / denominator, np.nan)
        return np.concatenate([means, columns], axis=1)
