"""A dataset's pairs as checked (``attnviz pairs check``), drawn as a table."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from attnviz.circuits.pair_checks import PairCheck, PairsChecked

_COLUMNS = ("line", "tokens", "answer", "rank", "clean", "corrupt", "note")


def pairs_table(checked: PairsChecked) -> RenderableType:
    """A row per pair (its tokens, text and twin; the answer's tokens; its rank; the two
    metrics; what is wrong with it), then the counts."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for name in _COLUMNS:
        table.add_column(name, justify="left" if name == "note" else "right")
    for each in checked.pairs:
        table.add_row(*_cells(each))
    counts = (
        f"{len(checked.pairs)} pairs on {checked.model} ({checked.metric}): the model "
        f"prefers the answer in {checked.preferred}, it is the likeliest next token in "
        f"{checked.answered}; {len(checked.repeated)} repeat an earlier pair; "
        f"{len(checked.refused)} would be refused by circuit"
    )
    return Group(table, Text(counts))


def _cells(each: PairCheck) -> list[str]:
    if each.tokens is None or each.measured is None:
        return [str(each.line), "", "", "", "", "", "refused (said on stderr)"]
    tokens, measured = each.tokens, each.measured
    twin = "" if tokens.corrupt is None else f" / {tokens.corrupt}"
    versus = "" if tokens.versus is None else f" / {tokens.versus}"
    notes = []
    if each.repeats is not None:
        notes.append(f"repeats line {each.repeats}")
    if not each.prefers:
        notes.append("the model prefers the versus answer")
    elif not each.answered:
        notes.append("not the likeliest next token")
    if tokens.answer > 1:
        notes.append("the answer's first token is read")
    return [
        str(each.line),
        f"{tokens.text}{twin}",
        f"{tokens.answer}{versus}",
        str(measured.rank),
        _number(measured.clean),
        _number(measured.corrupt),
        "; ".join(notes),
    ]


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:+.3f}"
