"""The step-by-step explanation in the terminal: each matrix labelled, large ones cut."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from attnviz.safe_text import display_label, spaces_shown

if TYPE_CHECKING:
    from attnviz.builtin.explain import Explanation, Step
    from attnviz.pretrained.explain import QueryExplanation

_CELL = 7  # "+12.34 " and the like
_MAX_ROWS = 10
_ROW_LABEL = 12


def _number(value: float, step: str) -> str:
    if value == -math.inf:
        return "−∞"
    if step == "mask":
        return "0"
    if step == "weights":  # probabilities: no sign to read past
        return f"{value:z.2f}"
    return f"{value:+z.2f}".replace("-", "−")


def _keep(count: int, room: int) -> list[int | None]:
    """Indices to show when only ``room`` fit: the first ones, a gap (None), the last two."""
    if count <= room:
        return list(range(count))
    tail = min(2, room - 2)
    return [*range(room - tail - 1), None, *range(count - tail, count)]


def matrix_table(step: Step, width: int) -> Table:
    rows, columns = step.matrix.shape if step.matrix.ndim == 2 else (1, step.matrix.shape[0])
    matrix = np.atleast_2d(step.matrix)
    room = max(3, (width - _ROW_LABEL - 4) // (_CELL + 1))
    shown_columns = _keep(columns, room)
    shown_rows = _keep(rows, _MAX_ROWS)
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))
    table.add_column("", no_wrap=True, max_width=_ROW_LABEL, overflow="ellipsis")
    for index in shown_columns:
        label = "…" if index is None else spaces_shown(step.columns[index])
        table.add_column(
            Text(label, overflow="ellipsis"), justify="right", no_wrap=True, max_width=_CELL + 3
        )
    for index in shown_rows:
        if index is None:
            table.add_row("⋮", *("⋮" for _ in shown_columns))
            continue
        cells = [
            "…" if c is None else _number(float(matrix[index, c]), step.name) for c in shown_columns
        ]
        table.add_row(Text(spaces_shown(step.rows[index]), overflow="ellipsis"), *cells)
    return table


def render(explanation: Explanation, width: int) -> RenderableType:
    e = explanation
    parts: list[RenderableType] = [
        Text(
            f"{display_label(e.model)} · {e.mode} attention · layer {e.layer} · head {e.head} · "
            f"d_model {e.d_model} · d_k {e.head_dim}",
            style="bold",
        ),
        Text(f"query tokens (rows): {' '.join(map(spaces_shown, e.query_tokens))}"),
        Text(f"key tokens (columns): {' '.join(map(spaces_shown, e.key_tokens))}"),
    ]
    for number, step in enumerate(e.steps, start=1):
        title = Text(f"\n{number}. {step.formula}", style="bold")
        title.append(f"   ({step.shape})", style="dim")
        parts.append(title)
        if step.note:
            parts.append(Text(step.note, style="italic"))
        rows, columns = np.atleast_2d(step.matrix).shape
        if rows > _MAX_ROWS or columns > max(3, (width - _ROW_LABEL - 4) // (_CELL + 1)):
            parts.append(
                Text(f"showing the first and last rows and columns of {step.shape}", style="dim")
            )
        parts.append(matrix_table(step, width))
        if step.name == "head_output":
            parts.append(Text("Each row as a weighted sum of V's rows:"))
            parts.extend(Text(f"  {display_label(sentence)}") for sentence in e.sentences)
    return Group(*parts)


def render_query(explanation: QueryExplanation) -> RenderableType:
    """One query's scores against every key, step by step, beside the model's own weights."""
    e = explanation
    rows = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0))
    rows.add_column("key token")
    has_bias = bool(np.any(np.isfinite(e.mask) & (e.mask != 0)))
    for name in (
        "q · k",
        f"× {e.scale:.4g}",
        "+ bias / mask" if has_bias else "+ mask",
        "softmax",
        "model's own",
    ):
        rows.add_column(name, justify="right")
    for index, key in enumerate(e.key_tokens):
        rows.add_row(
            spaces_shown(key),
            _number(float(e.dots[index]), ""),
            _number(float(e.scaled[index]), ""),
            _number(float(e.mask[index]), "" if has_bias else "mask"),
            _number(float(e.weights[index]), "weights"),
            _number(float(e.model_weights[index]), "weights"),
        )
    scale_note = (
        "1/√d_k" if abs(e.scale - 1) > 1e-9 else "1 (this model folds the scaling into W_Q)"
    )
    return Group(
        Text(
            f"{display_label(e.model)} · {e.mode} attention · layer {e.layer} · head {e.head} · "
            f"query {e.query_index} ({spaces_shown(e.query_token)})",
            style="bold",
        ),
        Text(
            f"The query vector q of {display_label(e.query_token)!r} meets every key vector k: "
            f"the dot product q · k, times the model's scale {scale_note}, plus the mask (−∞ "
            "hides a key; some models add a position bias here), then a softmax over the row."
        ),
        rows,
        Text(f"largest difference from the model's own weights: {e.largest_difference:.2e}"),
    )
