"""Per-head statistics: what kind of head is this?"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import StrEnum

import numpy as np

from attnviz.maps import AttentionMaps

# Special tokens as pretrained tokenizers spell them: [CLS], <s>, <|endoftext|>.
# The built-in tokenizer splits brackets off, so its tokens never look like this.
_SPECIAL = re.compile(r"^(\[[A-Z]+\]|<\|?[^<>\s]+\|?>)$")


class Column(StrEnum):
    LAYER = "layer"
    HEAD = "head"
    ENTROPY = "entropy"
    DISTANCE = "distance"
    SINK = "sink"
    PREVIOUS = "previous"
    SELF = "self"
    TOP_KEY = "top_key"


COLUMN_HELP = {
    Column.ENTROPY: "entropy of a query row in nats, averaged over rows (ln of the key count "
    "when uniform, 0 when all weight is on one key)",
    Column.DISTANCE: "mean |query position − key position| weighted by attention (self and "
    "masked only)",
    Column.SINK: "mean weight on the first token and on special tokens ([CLS], <s>, …)",
    Column.PREVIOUS: "mean weight a token gives the token just before it",
    Column.SELF: "mean weight a token gives itself",
    Column.TOP_KEY: "the key token with the most weight, summed over query rows",
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
    aligned = maps.mode != "cross"  # queries and keys are the same tokens
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    sink_columns = [
        0,
        *(k for k, token in enumerate(maps.key_tokens) if k and _SPECIAL.match(token)),
    ]
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
    rows: list[HeadStatistics], column: Column, reverse: bool = False
) -> list[HeadStatistics]:
    """Sorted by a column: statistics largest first, layer, head and top_key in order.

    Rows with no value for the column (distance in cross mode) go last.
    """
    name = column.value
    present = [row for row in rows if getattr(row, name) is not None]
    missing = [row for row in rows if getattr(row, name) is None]
    descending = column not in (Column.LAYER, Column.HEAD, Column.TOP_KEY)
    ordered = sorted(present, key=lambda row: getattr(row, name), reverse=descending != reverse)
    return ordered + missing


def as_dicts(rows: list[HeadStatistics]) -> list[dict[str, object]]:
    return [asdict(row) for row in rows]
