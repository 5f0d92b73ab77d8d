"""Per-head statistics: what kind of head is this?"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.grid import one_sequence
from attnviz.analysis.products import Block, HeadStatisticsProduct, of_whole
from attnviz.choices import MEASURES, Ablation, Measure, Method, Mode, Output
from attnviz.drawing import drawer
from attnviz.errors import UsageError
from attnviz.head_columns import DETECTORS, SUMMED, HeadColumn, HeadStatistics, Needs, RankBy
from attnviz.panels import panels_of

if TYPE_CHECKING:
    from pathlib import Path

    from attnviz.drawing import Picture
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


MEASURE_NAMES = frozenset(Measure)  # a StrEnum's members are their names


@dataclass(frozen=True)
class Answer:
    """What effects are measured on: the answer's first token after the text and, with a
    versus answer, its first token too; the metric is the answer token's log-probability,
    or logit(answer) − logit(versus)."""

    answer: str
    answer_token: str  # as the tokenizer spells it
    log_prob: float  # the answer token's clean log-probability (natural log)
    versus: str | None = None
    versus_token: str | None = None
    clean_metric: float | None = None  # None: the log-probability
    corrupt: str | None = None  # the corrupted text, where effects are patched from it
    corrupt_metric: float | None = None
    method: Method = Method.EXACT
    # Patch effects given as the fraction of the corruption's change they bring back,
    # (patched − corrupted) / (clean − corrupted), not in the metric's units.
    normalized: bool = False
    rank: int | None = None  # the answer token's place among the next tokens (1: likeliest)
    # The model's likeliest next tokens after the text, with their probabilities.
    predictions: tuple[tuple[str, float], ...] = ()

    # the measure's name (a Measure's value, or a caller's function's name); None: the
    # log-probability, or with a versus answer the logit difference
    measure: str | None = None

    @property
    def metric_name(self) -> str:
        if self.measure is not None:
            return self.measure
        return Measure.LOG_PROB if self.versus is None else Measure.LOGIT_DIFFERENCE

    @property
    def metric_label(self) -> str:
        """What the effects measure, in words: a measure's label with the tokens in it."""
        if self.metric_name not in MEASURE_NAMES:
            return f"metric {self.metric_name}"
        label = MEASURES[Measure(self.metric_name)].label
        return label.format(answer=repr(self.answer_token), versus=repr(self.versus_token))

    def unit(self) -> str:
        """A change in the metric, with its unit where the measure has one."""
        if self.metric_name not in MEASURE_NAMES:
            return f"change in {self.metric_name}"
        measured = MEASURES[Measure(self.metric_name)]
        return f"change in {measured.short} ({measured.unit})"

    @property
    def probability(self) -> float:
        return math.exp(self.log_prob)

    @property
    def measure_given(self) -> bool:
        """True where the metric is not the default for the answer (log-probability)."""
        return self.metric_name != Measure.LOG_PROB

    def corruption(self) -> float:
        """clean − corrupted: what the corruption took of the metric, by which patch
        effects are normalised (refused where it is 0: nothing was taken)."""
        if self.clean_metric is None or self.corrupt_metric is None:
            raise UsageError("--normalize reads patch effects as a fraction: give --corrupt")
        change = self.clean_metric - self.corrupt_metric
        if change == 0:
            raise UsageError(
                f"the corrupted text leaves the metric as it was ({self.clean_metric:z.4g}): no "
                "fraction of its change can be recovered (--normalize needs a corruption "
                "that moves it)"
            )
        return change

    def fields(self) -> dict[str, object]:
        """What a table of effects on it records beside its rows (the metric's fields only
        where a versus answer, a corrupted text or the gradient method made them)."""
        found: dict[str, object] = {
            "answer": self.answer,
            "answer_token": self.answer_token,
            "answer_log_prob": self.log_prob,
        }
        if self.rank is not None:
            found |= {"answer_rank": self.rank, "answer_probability": self.probability}
        if self.versus is not None:
            found |= {"versus": self.versus, "versus_token": self.versus_token}
        if self.versus is not None or self.corrupt is not None or self.measure_given:
            found |= {"metric": self.metric_name, "clean_metric": self.clean_metric}
        if self.corrupt is not None:
            found |= {"corrupt": self.corrupt, "corrupt_metric": self.corrupt_metric}
        if self.method is not Method.EXACT:
            found["method"] = self.method.value
        if self.normalized:
            found["normalized"] = True
        return found


class Drawn:
    """A result that draws itself (effects, a trace, a knockout): :meth:`save` writes its
    picture by the suffix of a path, and a notebook shows the picture, not the arrays."""

    def picture(self, *args: Any, **options: Any) -> Picture:  # each its own options
        raise NotImplementedError

    def save(self, path: str | Path, **options: Any) -> None:
        """:meth:`picture` (with ``options``) written to ``path`` (.png, .svg or .pdf),
        whole or not at all."""
        drawer().save_figure(path, lambda kind: self.picture(format=kind, **options))

    def _repr_png_(self) -> bytes | None:
        return self.picture()._repr_png_()


@dataclass(frozen=True)
class HeadEffects(Drawn):
    """Each chosen head's effect on one answer token: ``ablation`` and ``dla``, and with a
    corrupted text ``patch``, (L, H) float64 in the order of ``layers`` and ``heads``."""

    on: Answer
    ablate: Ablation
    layers: list[int]
    heads: list[int]
    ablation: np.ndarray | None  # (L, H); None with --ablate none
    dla: np.ndarray | None  # (L, H); None for a metric not linear in the logits
    patch: np.ndarray | None = None  # (L, H)

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        columns = ", ".join(
            name for name in ("ablation", "dla", "patch") if getattr(self, name) is not None
        )
        return (
            f"<HeadEffects on answer {self.on.answer_token!r} (log-probability "
            f"{self.on.log_prob:z.3f}): {len(self.layers)} layers × {len(self.heads)} heads, "
            f"{columns}>"
        )

    def picture(
        self, column: str | None = None, format: Output | str = "png", **style: Any
    ) -> Picture:
        """The layers × heads grid ``heads --picture`` draws of one effect: ``column``
        ablation, dla or patch (by default patch, else ablation, else dla), in
        diverging colours centred on 0. ``style``: ``dpi``, ``figsize``, ``font_size``,
        ``title``, as export's options. ``.data`` holds the bytes; a notebook shows it."""
        return drawer().effects_figure(self, column, format, style)

    @property
    def answer(self) -> str:
        return self.on.answer

    @property
    def answer_token(self) -> str:
        return self.on.answer_token

    @property
    def log_prob(self) -> float:
        return self.on.log_prob

    def normalized(self) -> HeadEffects:
        """The patch effects as the fraction of the corruption's change each head brings
        back, (patched − corrupted) / (clean − corrupted): 1 all of it, 0 none (the IOI
        paper's and TransformerLens's tutorials' reading); ablation and dla as they are."""
        if self.patch is None:
            raise UsageError("--normalize reads patch effects as a fraction: give --corrupt")
        on = replace(self.on, normalized=True)
        return replace(self, on=on, patch=self.patch / self.on.corruption())

    def drawn_column(self) -> str:
        """The effect a picture draws unless told: patch, else ablation, else dla."""
        return next(
            name for name in ("patch", "ablation", "dla") if getattr(self, name) is not None
        )

    def of(self, layer: int, head: int) -> dict[str, float]:
        """One head's effects by column name."""
        row, column = self.layers.index(layer), self.heads.index(head)
        found = {
            name: float(values[row, column])
            for name, values in (
                ("ablation", self.ablation),
                ("dla", self.dla),
                ("patch", self.patch),
            )
            if values is not None
        }
        return found

    def fields(self) -> dict[str, object]:
        """What a table of these effects records beside its rows."""
        return {**self.on.fields(), "ablate": self.ablate.value}


@dataclass(frozen=True)
class Knockout(Drawn):
    """The answer's log-probability change when some query rows may not read some keys,
    in a window of layers around each chosen layer."""

    answer: str
    answer_token: str
    log_prob: float  # the clean log-probability
    rows: list[int]  # the query rows that may not read
    span: list[int]  # the keys they may not read
    window: int  # how many layers each knockout spans
    layers: list[int]  # the layer each window is centred on
    windows: list[tuple[int, int]]  # the first and last layer of each window
    change: np.ndarray  # (L,) natural log

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        return (
            f"<Knockout on answer {self.answer_token!r}: rows {self.rows} may not read keys "
            f"{self.span}, {self.window} layer(s) at a time, {len(self.layers)} layers>"
        )

    def picture(self, format: Output | str = "png", **style: Any) -> Picture:
        """The change in the answer's log-probability for each layer's window, as bars
        (``heads --knockout --picture`` draws it). ``style``: ``dpi``, ``figsize``,
        ``font_size``, ``title``, as export's options. A notebook shows it."""
        return drawer().knockout_figure(self, format, style)

    def records(self) -> list[dict[str, object]]:
        """A row per window: its layer, the layers it knocks out and the change."""
        return [
            {"layer": layer, "first": first, "last": last, "knockout": float(change)}
            for layer, (first, last), change in zip(
                self.layers, self.windows, self.change, strict=True
            )
        ]

    def fields(self) -> dict[str, object]:
        """What a table of these windows records beside its rows."""
        return {
            "answer": self.answer,
            "answer_token": self.answer_token,
            "answer_log_prob": self.log_prob,
            "knockout_rows": self.rows,
            "knockout_span": self.span,
            "window": self.window,
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
    if maps.aggregate is not None:
        raise UsageError("statistics are per head: give maps that are not aggregated")
    if maps.pooled is not None:
        raise UsageError("statistics are of exact rows, not of pooled bins")
    if maps.weighting is not None:
        raise UsageError(
            "head statistics read each row as a distribution, and value-weighted maps are not: "
            "give the maps without --weigh"
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
