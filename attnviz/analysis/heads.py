"""Per-head statistics: what kind of head is this?"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.grid import one_sequence
from attnviz.analysis.products import Block, HeadStatisticsProduct, of_whole
from attnviz.choices import Mode
from attnviz.errors import UsageError, refuse
from attnviz.head_columns import DETECTORS, SUMMED, HeadColumn, HeadStatistics, Needs, RankBy
from attnviz.panels import panels_of

if TYPE_CHECKING:
    from attnviz.analysis.effects import HeadEffects
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel

DETECTOR_COLUMNS = frozenset(DETECTORS)
# A table in a terminal has room for one set or the other: the statistics, or the
# detectors' scores with what explains them (the weight on the first token, left out).
# Each layer's kind is said above the table, where "sliding 512" takes no column.
STATISTICS_TABLE = (
    frozenset(column for column in HeadColumn if column.in_terminal)
    - DETECTOR_COLUMNS
    - {HeadColumn.KIND}
)
DETECTORS_TABLE = frozenset(column for column in HeadColumn if column.beside_detectors)
# With an answer: its effects, beside where the head looks.
EFFECTS_TABLE = frozenset(
    column for column in HeadColumn if column.needs in (Needs.ANSWER, Needs.CORRUPT)
) | {
    HeadColumn.LAYER,
    HeadColumn.HEAD,
    HeadColumn.ENTROPY,
    HeadColumn.SINK,
    HeadColumn.TOP_KEY,
}


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
    effects: HeadEffects | None = None  # on an answer: its rows hold ablation and dla

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
        """Those of the ``shown`` columns that apply: span only where a span was given, the
        effects only where an answer was (ablation where it was run)."""
        left_out = self.effects is not None and self.effects.ablation is None
        given = {
            Needs.SPAN: bool(self.span),
            Needs.ANSWER: self.effects is not None,
            Needs.CORRUPT: self.effects is not None and self.effects.patch is not None,
            Needs.KINDS: any(row.kind is not None for row in self.rows),
        }
        return [
            column
            for column in HeadColumn
            if column in shown
            and given.get(column.needs, True)
            and not (left_out and column is HeadColumn.ABLATION)
        ]

    def with_effects(self, effects: HeadEffects) -> HeadTable:
        """The table with each head's effects on an answer beside its statistics."""
        rows = [
            replace(row, values={**row.values, **effects.of(row.layer, row.head)})
            for row in self.rows
        ]
        return replace(self, rows=rows, effects=effects)


def head_statistics(maps: AttentionMaps) -> list[HeadStatistics]:
    """A row of statistics per (layer, head) held in ``maps``: over the rows they hold."""
    refuse(
        (maps.aggregate is not None, "statistics are per head: give maps that are not aggregated"),
        (maps.pooled is not None, "statistics are of exact rows, not of pooled bins"),
        (
            maps.weighting is not None,
            "head statistics read each row as a distribution, and value-weighted maps are not: "
            "give the maps without --weigh",
        ),
    )
    rows = maps.query_positions
    queries = len(maps.query_tokens) if rows is None else max(rows) + 1
    product = statistics_product(
        maps.mode, queries, maps.key_tokens, maps.key_special, rows, maps.span, maps.between
    )
    summed = [_of_held_rows(product(len(maps.heads)), grid, rows) for grid in maps.weights]
    return statistics_rows(
        np.stack(summed), maps.layers, maps.heads, maps.key_tokens, maps.layer_kinds
    )


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
    summed: np.ndarray,
    layers: Sequence[int],
    heads: Sequence[int],
    key_tokens: Sequence[str],
    kinds: Sequence[str] | None = None,
) -> list[HeadStatistics]:
    """Rows of :class:`HeadStatistics` from the (L, H, len(SUMMED) + S) results of
    :class:`~attnviz.analysis.products.HeadStatisticsProduct`: the means, then the weight
    each key received; ``kinds``, each of the ``layers``' attention (None: all global)."""
    rows = []
    for number, (layer, per_head) in enumerate(zip(layers, summed, strict=True)):
        kind = None if kinds is None else kinds[number]
        for head, values in zip(heads, per_head, strict=True):
            means = {
                column.value: None if np.isnan(value) else float(value)
                for column, value in zip(SUMMED, values[: len(SUMMED)], strict=True)
            }
            top = int(values[len(SUMMED) :].argmax())
            rows.append(HeadStatistics(layer, head, means, top, key_tokens[top], kind))
    return rows


def sort_rows(
    rows: list[HeadStatistics], column: HeadColumn | str, reverse: bool = False
) -> list[HeadStatistics]:
    """Sorted by a column: statistics largest first, layer, head and top_key in order.

    Rows with no value for the column (distance in cross mode) go last.
    """
    column = HeadColumn(column)
    present = [row for row in rows if row[column] is not None]
    missing = [row for row in rows if row[column] is None]
    ordered = sorted(present, key=lambda row: row[column], reverse=column.ascending == reverse)
    return ordered + missing


def as_dicts(rows: list[HeadStatistics], columns: Sequence[HeadColumn]) -> list[dict[str, object]]:
    return [{column.value: row[column] for column in columns} for row in rows]


@dataclass(frozen=True)
class TopHeads:
    """The ``count`` heads ``heads --sort by`` lists first: largest values first, or
    smallest with ``lowest`` (``--by entropy --lowest``: the most focused heads)."""

    count: int
    by: RankBy
    lowest: bool = False
    effects: HeadEffects | None = None  # each head's effect on an answer, for --by ablation

    @property
    def by_effect(self) -> bool:
        """Heads are ranked by their effect on an answer (ablation, dla), not a statistic."""
        return HeadColumn(self.by).needs is Needs.ANSWER

    def panels(self, maps: AttentionMaps) -> list[MapPanel]:
        """The chosen maps in rank order, each titled with its value."""
        if maps.aggregate is not None:
            raise UsageError("heads are ranked one by one: give maps that are not aggregated")
        by = HeadColumn(self.by)
        values = self._values(maps, by)
        present = [place for place, value in values.items() if value is not None]
        missing = [place for place, value in values.items() if value is None]
        ranked = sorted(present, key=values.__getitem__, reverse=by.ascending == self.lowest)
        held = {(panel.layer, panel.head): panel for panel in panels_of(maps)}
        panels = []
        for layer, head in (ranked + missing)[: self.count]:
            value = values[layer, head]  # None: one token has no previous token
            shown = "–" if value is None else f"{value:z.3f}"
            title = f"layer {layer} · head {head} · {self.by} {shown}"
            panels.append(held[layer, head]._replace(title=title))
        return panels

    def _values(self, maps: AttentionMaps, by: HeadColumn) -> dict[tuple[int, int], Any]:
        """Each held head's value of ``by``: its statistic, or its effect on the answer."""
        if by.needs is Needs.ANSWER:
            if self.effects is None:
                raise UsageError(f"--by {self.by} ranks heads by their effect on an answer")
            read = self.effects.of(maps.layers[0], maps.heads[0])
            if by.value not in read:
                raise UsageError(
                    f"--by {self.by} reads an effect this run left out: --by " + " or ".join(read)
                )
            return {
                (layer, head): self.effects.of(layer, head)[by.value]
                for layer in maps.layers
                for head in maps.heads
            }
        if not maps.one_sequence and by.one_sequence_only:
            which = (
                "cross attention does" if maps.between is None else "maps between two sentences do"
            )
            raise UsageError(
                f"{self.by} compares query and key positions, which {which} not share: "
                "rank by entropy or sink"
            )
        if by.needs is Needs.SPAN and maps.span is None:
            raise UsageError("--by span ranks heads by their weight on a span: give --span")
        return {(row.layer, row.head): row[by] for row in head_statistics(maps)}

    def describe(self) -> str:
        order = "lowest" if self.lowest else "highest"
        return f"the {self.count} heads of {order} {self.by}"
