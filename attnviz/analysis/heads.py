"""Per-head statistics: what kind of head is this?"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnviz.choices import HeadColumn, Mode, RankBy

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps, MapPanel

COLUMN_HELP = {
    HeadColumn.ENTROPY: "entropy of a query row in nats, averaged over rows (ln of the key count "
    "when uniform, 0 when all weight is on one key)",
    HeadColumn.DISTANCE: "mean |query position − key position| weighted by attention (self and "
    "masked only)",
    HeadColumn.SINK: "mean weight on the first token and on special tokens ([CLS], <s>, …) as the "
    "tokenizer marks them",
    HeadColumn.PREVIOUS: "mean weight a token gives the token just before it",
    HeadColumn.SELF: "mean weight a token gives itself",
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
    top_key: str


def head_statistics(maps: AttentionMaps) -> list[HeadStatistics]:
    """A row of statistics per (layer, head) held in ``maps``."""
    if maps.aggregate is not None:
        raise ValueError("statistics are per head: give maps that are not aggregated")
    aligned = maps.mode is not Mode.CROSS  # queries and keys are the same tokens
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    sink_columns = sorted({0, *maps.special_positions("key")})
    distance = np.abs(np.arange(queries)[:, None] - np.arange(keys)[None, :])
    rows = []
    for i, layer in enumerate(maps.layers):
        for j, head in enumerate(maps.heads):
            matrix = maps.weights[i, j].astype(np.float64)
            logs = np.log(matrix, out=np.zeros_like(matrix), where=matrix > 0)
            rows.append(
                HeadStatistics(
                    layer=layer,
                    head=head,
                    entropy=float(-(matrix * logs).sum(-1).mean()),
                    distance=float((matrix * distance).sum(-1).mean()) if aligned else None,
                    sink=float(matrix[:, sink_columns].sum(-1).mean()),
                    previous=(
                        float(np.diagonal(matrix, -1).mean()) if aligned and queries > 1 else None
                    ),
                    self=float(np.diagonal(matrix).mean()) if aligned else None,
                    top_key=maps.key_tokens[int(matrix.sum(0).argmax())],
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
    descending = column not in (HeadColumn.LAYER, HeadColumn.HEAD, HeadColumn.TOP_KEY)
    ordered = sorted(present, key=lambda row: getattr(row, name), reverse=descending != reverse)
    return ordered + missing


def as_dicts(rows: list[HeadStatistics]) -> list[dict[str, object]]:
    return [asdict(row) for row in rows]


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
        if maps.mode is Mode.CROSS and self.by in (RankBy.DISTANCE, RankBy.PREVIOUS, RankBy.SELF):
            raise ValueError(
                f"{self.by} compares query and key positions, which cross attention does not "
                "share: rank by entropy or sink"
            )
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
