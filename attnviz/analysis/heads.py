"""Per-head statistics: what kind of head is this?"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from attnviz.analysis.grid import one_sequence
from attnviz.analysis.products import Block, HeadStatisticsProduct, of_whole
from attnviz.choices import Detector, HeadColumn, Mode, RankBy

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps, MapPanel

DETECTOR_COLUMNS = frozenset(HeadColumn(detector.value) for detector in Detector)
# A table in a terminal has room for one set or the other: the statistics, or the
# detectors' scores with what explains them (the weight on the first token, left out).
STATISTICS_TABLE = frozenset(HeadColumn) - DETECTOR_COLUMNS
DETECTORS_TABLE = DETECTOR_COLUMNS | {
    HeadColumn.LAYER,
    HeadColumn.HEAD,
    HeadColumn.SINK,
    HeadColumn.SPAN,
    HeadColumn.TOP_KEY,
}

COLUMN_HELP = {
    HeadColumn.ENTROPY: "entropy of a query row in nats, averaged over rows (ln of the key count "
    "when uniform, 0 when all weight is on one key)",
    HeadColumn.DISTANCE: "mean |query position − key position| weighted by attention (self and "
    "masked only)",
    HeadColumn.SINK: "mean weight on the first token and on special tokens ([CLS], <s>, …) as the "
    "tokenizer marks them",
    HeadColumn.PREVIOUS: "mean weight a token gives the token just before it",
    HeadColumn.SELF: "mean weight a token gives itself",
    HeadColumn.SPAN: "mean weight on the keys of --span: how much a head reads of a passage",
    HeadColumn.PREVIOUS_TOKEN: "TransformerLens's previous-token score: weight on the token "
    "just before, over all weight off the first token",
    HeadColumn.DUPLICATE_TOKEN: "TransformerLens's duplicate-token score: weight on earlier "
    "copies of the token, over all weight off the first token",
    HeadColumn.INDUCTION: "TransformerLens's induction score: weight on the token after an "
    "earlier copy of the token, over all weight off the first token",
    HeadColumn.TOP_KEY_POSITION: "the position of that key (0: the first token)",
    HeadColumn.TOP_KEY: "the key token with the most weight, summed over query rows",
}


@dataclass(frozen=True)
class HeadStatistics:
    layer: int
    head: int
    entropy: float
    distance: float | None
    sink: float
    previous: float | None
    self: float | None
    span: float | None
    previous_token: float | None
    duplicate_token: float | None
    induction: float | None
    top_key_position: int
    top_key: str


@dataclass(frozen=True)
class HeadTable:
    """Each head's statistics for one input, and what they were read from: the query rows
    (None: every one) and the keys of the span statistic (None: no span)."""

    model: str
    mode: Mode
    key_count: int
    rows: list[HeadStatistics]
    query_positions: list[int] | None = None
    span: list[int] | None = None

    @classmethod
    def of(cls, maps: AttentionMaps) -> HeadTable:
        return cls(
            maps.model,
            maps.mode,
            len(maps.key_tokens),
            head_statistics(maps),
            maps.query_positions,
            maps.span,
        )

    def columns(self, shown: Collection[HeadColumn] = tuple(HeadColumn)) -> list[HeadColumn]:
        """Those of the ``shown`` columns that apply: span only where a span was given."""
        return [
            column
            for column in HeadColumn
            if column in shown and (column is not HeadColumn.SPAN or self.span)
        ]


def head_statistics(maps: AttentionMaps) -> list[HeadStatistics]:
    """A row of statistics per (layer, head) held in ``maps``: over the rows they hold."""
    if maps.aggregate is not None:
        raise ValueError("statistics are per head: give maps that are not aggregated")
    if maps.pooled is not None:
        raise ValueError("statistics are of exact rows, not of pooled bins")
    rows = maps.query_positions
    queries = len(maps.query_tokens) if rows is None else max(rows) + 1
    product = statistics_product(
        maps.mode, queries, maps.key_tokens, maps.key_special, rows, maps.span, maps.between
    )
    summed = [_of_held_rows(product(len(maps.heads)), grid, rows) for grid in maps.weights]
    return statistics_rows(np.stack(summed), maps.layers, maps.heads, maps.key_tokens)


def statistics_product(
    mode: Mode,
    queries: int,
    key_tokens: Sequence[str],
    key_special: Sequence[bool] | None,
    rows: Sequence[int] | None = None,
    span: Sequence[int] | None = None,
    between: str | None = None,
) -> Callable[[int], HeadStatisticsProduct]:
    """heads -> the statistics product of one input read in ``mode``: the one place that
    says which statistics maps have (cross attention, or one sentence's rows over the
    other's columns: no positions or tokens shared)."""
    aligned = one_sequence(mode, between)
    return partial(
        HeadStatisticsProduct,
        queries=queries,
        keys=len(key_tokens),
        sink_columns=sink_columns_of(key_special),
        aligned=aligned,
        causal=mode is Mode.MASKED,
        rows=rows,
        span=span,
        tokens=key_tokens if aligned else None,
    )


def _of_held_rows(
    product: HeadStatisticsProduct, weights: np.ndarray, rows: list[int] | None
) -> np.ndarray:
    """Statistics of (H, rows held, S) maps: every row, or the rows at positions ``rows``."""
    if rows is None:
        return of_whole(product, weights)
    for head, matrix in enumerate(weights):
        product.add(head, Block(np.asarray(rows), matrix))
    return product.result()


def sink_columns_of(key_special: Sequence[bool] | None) -> list[int]:
    """The keys a sink is measured on: the first token, and the special tokens."""
    return sorted({0, *(position for position, flag in enumerate(key_special or []) if flag)})


def statistics_rows(
    summed: np.ndarray, layers: Sequence[int], heads: Sequence[int], key_tokens: Sequence[str]
) -> list[HeadStatistics]:
    """Rows of :class:`HeadStatistics` from the (L, H, 9 + S) results of
    :class:`~attnviz.analysis.products.HeadStatisticsProduct`."""
    fields = HeadStatisticsProduct.FIELDS
    rows = []
    for layer, per_head in zip(layers, summed, strict=True):
        for head, values in zip(heads, per_head, strict=True):
            means = {
                name: None if np.isnan(value) else float(value)
                for name, value in zip(fields, values[: len(fields)], strict=True)
            }
            top = int(values[len(fields) :].argmax())
            rows.append(
                HeadStatistics(
                    layer=layer, head=head, top_key_position=top, top_key=key_tokens[top], **means
                )
            )
    return rows


def sort_rows(
    rows: list[HeadStatistics], column: HeadColumn, reverse: bool = False
) -> list[HeadStatistics]:
    """Sorted by a column: statistics largest first, layer, head and top_key in order.

    Rows with no value for the column (distance in cross mode) go last.
    """
    name = column.value
    present = [row for row in rows if getattr(row, name) is not None]
    missing = [row for row in rows if getattr(row, name) is None]
    descending = column not in (
        HeadColumn.LAYER,
        HeadColumn.HEAD,
        HeadColumn.TOP_KEY_POSITION,
        HeadColumn.TOP_KEY,
    )
    ordered = sorted(present, key=lambda row: getattr(row, name), reverse=descending != reverse)
    return ordered + missing


def as_dicts(rows: list[HeadStatistics], columns: Sequence[HeadColumn]) -> list[dict[str, object]]:
    return [{column.value: asdict(row)[column.value] for column in columns} for row in rows]


# What compares query and key positions or tokens, which cross attention does not share.
ALIGNED_ONLY = frozenset(
    {
        RankBy.DISTANCE,
        RankBy.PREVIOUS,
        RankBy.SELF,
        RankBy.PREVIOUS_TOKEN,
        RankBy.DUPLICATE_TOKEN,
        RankBy.INDUCTION,
    }
)


@dataclass(frozen=True)
class TopHeads:
    """The ``count`` heads ``heads --sort by`` lists first: largest values first, or
    smallest with ``lowest`` (``--by entropy --lowest``: the most focused heads)."""

    count: int
    by: RankBy
    lowest: bool = False

    def panels(self, maps: AttentionMaps) -> list[MapPanel]:
        """The chosen maps in rank order, each titled with its value."""
        if maps.aggregate is not None:
            raise ValueError("heads are ranked one by one: give maps that are not aggregated")
        if not maps.one_sequence and self.by in ALIGNED_ONLY:
            which = (
                "cross attention does" if maps.between is None else "maps between two sentences do"
            )
            raise ValueError(
                f"{self.by} compares query and key positions, which {which} not share: "
                "rank by entropy or sink"
            )
        if self.by is RankBy.SPAN and maps.span is None:
            raise ValueError("--by span ranks heads by their weight on a span: give --span")
        rows = sort_rows(head_statistics(maps), HeadColumn(self.by.value), self.lowest)
        held = {(panel.layer, panel.head): panel for panel in maps.panels()}
        panels = []
        for row in rows[: self.count]:
            value = getattr(row, self.by.value)  # None: one token has no previous token
            shown = "–" if value is None else f"{value:.3f}"
            title = f"layer {row.layer} · head {row.head} · {self.by} {shown}"
            panels.append(held[row.layer, row.head]._replace(title=title))
        return panels

    def describe(self) -> str:
        order = "lowest" if self.lowest else "highest"
        return f"the {self.count} heads of {order} {self.by}"
