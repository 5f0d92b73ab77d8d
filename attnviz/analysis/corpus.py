"""Per-head statistics over a whole corpus, in bounded memory.

For every (layer, head) and every statistic of ``heads`` that a corpus sums
(:data:`attnviz.head_columns.CORPUS`: the means, the position of the top key and, over
the inputs that carry an answer, the effects on it) a
running mean and
variance (Welford's update, merged with Chan's formula) and a DDSketch, a
mergeable quantile sketch whose quantiles are within a relative accuracy; up to
EXACT_UP_TO values, the values themselves, whose quantiles are exact.
Memory grows with the number of heads, never with the number of inputs; two
partial results (from shards, or workers) merge into the result of the whole.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from attnviz.errors import AttnvizError, describe
from attnviz.head_columns import CORPUS

if TYPE_CHECKING:
    from attnviz.analysis.heads import HeadTable
    from attnviz.extractor import Extractor
    from attnviz.inputs import Input
    from attnviz.loading import ExtractorSpec
    from attnviz.request import Request

STATISTICS = tuple(column.value for column in CORPUS)  # what stats sums, in its order
# One input of a corpus: its line number and the input (its answer, versus answer and
# corrupted twin where it carries them).
Line = tuple[int, "Input"]
QUANTILES = (0.05, 0.5, 0.95)


@dataclass(frozen=True)
class CorpusWork:
    """The work of ``stats``, as every engine takes it: the lines; the model to load and
    what to read of it; ``batch_size`` inputs read at once; ``progress`` told how many
    inputs are counted so far."""

    lines: Iterable[Line]
    spec: ExtractorSpec
    request: Request
    batch_size: int
    progress: Callable[[int], None]


RELATIVE_ACCURACY = 0.01  # of the sketch's quantiles


@dataclass
class Running:
    """Count, mean and sum of squared deviations, updated one value at a time."""

    count: int = 0
    mean: float = 0.0
    squares: float = 0.0  # Σ (x − mean)²

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.squares += delta * (value - self.mean)

    def merge(self, other: Running) -> None:
        if not other.count:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.squares += other.squares + delta * delta * self.count * other.count / total
        self.mean += delta * other.count / total
        self.count = total

    @property
    def std(self) -> float:
        """The population standard deviation."""
        return math.sqrt(self.squares / self.count) if self.count else math.nan


def _sketch() -> Any:
    from ddsketch import DDSketch

    return DDSketch(relative_accuracy=RELATIVE_ACCURACY)


# Up to this many values a cell keeps them, and its quantiles are exact: a sketch's
# quantile is one of the values, the lower by rank, so that over two inputs, 1 and 3,
# its 95th percentile (1) lay below their mean (2).
EXACT_UP_TO = 100


@dataclass
class Cell:
    running: Running = field(default_factory=Running)
    sketch: Any = field(default_factory=_sketch)
    values: list[float] | None = field(default_factory=list)  # None past EXACT_UP_TO

    def add(self, value: float) -> None:
        self.running.add(value)
        self.sketch.add(value)
        if self.values is not None:
            self.values.append(value)
            self._bound()

    def merge(self, other: Cell) -> None:
        self.running.merge(other.running)
        self.sketch.merge(other.sketch)
        if self.values is not None and other.values is not None:
            self.values.extend(other.values)
            self._bound()
        else:
            self.values = None

    def quantile(self, quantile: float) -> float:
        """Exact while the cell holds at most EXACT_UP_TO values (linearly interpolated
        between the two values around its rank, as numpy's percentile); past that, the
        sketch's, within RELATIVE_ACCURACY."""
        if self.values is None:
            return float(self.sketch.get_quantile_value(quantile))
        ordered = sorted(self.values)
        rank = quantile * (len(ordered) - 1)
        below = math.floor(rank)
        above = min(below + 1, len(ordered) - 1)
        return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)

    def _bound(self) -> None:
        if self.values is not None and len(self.values) > EXACT_UP_TO:
            self.values = None


@dataclass
class CorpusStatistics:
    """The statistics of every head seen so far; ``add`` one input's table at a time."""

    inputs: int = 0
    model: str = ""  # the name of the model read (its extractor's), once one is
    cells: dict[tuple[int, int, str], Cell] = field(default_factory=dict)
    failed: int = 0  # inputs the model could not read, left out
    first_failure: str = ""  # why the first of them failed
    kinds: dict[int, str] = field(default_factory=dict)  # each layer's attention, if they differ

    def add(self, table: HeadTable) -> None:
        for row in table.rows:
            if row.kind is not None:
                self.kinds[row.layer] = row.kind
            for name in STATISTICS:
                value = row[name]
                if value is not None:  # distance and the like have none in cross mode
                    self.cells.setdefault((row.layer, row.head, name), Cell()).add(float(value))
        self.inputs += 1

    def add_all(self, tables: Iterable[HeadTable]) -> CorpusStatistics:
        for table in tables:
            self.add(table)
        return self

    def add_corpus(
        self,
        extractor: Extractor,
        lines: Iterable[Line],
        request: Request,
        batch_size: int,
    ) -> Iterator[int]:
        """Add the statistics of every (line number, input), ``batch_size`` inputs per
        forward pass, and each head's effects on the answers given (a causal language
        model's; its patch where an input has a corrupted twin); yields the inputs counted
        after each pass. A pass that fails is read again one item at a time: an item the
        model cannot read (an empty sentence B, a target an encoder has no use for, an
        answer an encoder has no head for) is counted as failed, with its line, and the
        rest go on."""

        asked = replace(request, maps=False, statistics=True, effects=True)

        def tables(chunk: list[Line]) -> list[HeadTable]:
            read = extractor.run([given for _, given in chunk], asked, batch_size=len(chunk))
            return [found.statistics for found in read if found.statistics is not None]

        self.model = self.model or extractor.name

        stream = iter(lines)
        while chunk := list(itertools.islice(stream, batch_size)):
            try:
                self.add_all(tables(chunk))
            except (AttnvizError, ValueError):
                for line, given in chunk:
                    try:
                        self.add_all(tables([(line, given)]))
                    except (AttnvizError, ValueError) as error:
                        self.failed += 1
                        self.first_failure = self.first_failure or (
                            f"line {line}: {describe(error)[1]}"
                        )
            yield self.inputs

    def merge(self, other: CorpusStatistics) -> None:
        """Fold in the statistics of other inputs (another shard, another worker)."""
        for key, cell in other.cells.items():
            self.cells.setdefault(key, Cell()).merge(cell)
        self.inputs += other.inputs
        self.model = self.model or other.model
        self.failed += other.failed
        self.first_failure = self.first_failure or other.first_failure
        self.kinds |= other.kinds

    def rows(self) -> list[dict[str, Any]]:
        """A row per (layer, head, statistic): count, mean, std and quantiles (and the
        layer's kind, where the model's layers differ)."""
        rows = []
        for (layer, head, name), cell in sorted(
            self.cells.items(),
            key=lambda item: (item[0][0], item[0][1], STATISTICS.index(item[0][2])),
        ):
            place: dict[str, Any] = {"layer": layer, "head": head}
            if self.kinds:
                place["kind"] = self.kinds[layer]
            rows.append({**place, "statistic": name, **_summary(cell)})
        return rows

    def kind_rows(self) -> list[dict[str, Any]]:
        """A row per (layer kind, statistic), over every head of the layers of that kind
        and every input: what global layers read against sliding ones. Empty where the
        model's layers are all global."""
        pooled: dict[tuple[str, str], Cell] = {}
        for (layer, _, name), cell in self.cells.items():
            if layer in self.kinds and name != "top_key_position":
                pooled.setdefault((self.kinds[layer], name), Cell()).merge(cell)
        return [
            {"kind": kind, "statistic": name, **_summary(pooled[kind, name])}
            for kind, name in sorted(pooled, key=lambda key: (key[0], STATISTICS.index(key[1])))
        ]

    def statistics(self) -> list[str]:
        """The statistics held (span only where a span was scored), in STATISTICS' order."""
        held = {name for _, _, name in self.cells}
        return [name for name in STATISTICS if name in held]

    def means(self, name: str) -> tuple[list[int], list[int], list[list[float]]]:
        """One statistic's corpus means as a layers × heads grid (NaN where none)."""
        layers = sorted({layer for layer, _, _ in self.cells})
        heads = sorted({head for _, head, _ in self.cells})
        grid = [
            [
                self.cells[(layer, head, name)].running.mean
                if (layer, head, name) in self.cells
                else math.nan
                for head in heads
            ]
            for layer in layers
        ]
        return layers, heads, grid


def _summary(cell: Cell) -> dict[str, Any]:
    """A cell's count, mean, std and quantiles."""
    summary: dict[str, Any] = {
        "count": cell.running.count,
        "mean": cell.running.mean,
        "std": cell.running.std,
    }
    for quantile in QUANTILES:
        summary[f"p{round(quantile * 100):02d}"] = cell.quantile(quantile)
    return summary
