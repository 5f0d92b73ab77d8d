"""Activations read by name, summed up for a person: a row per name with its shape and
the spread of its numbers (the numbers themselves are data: ``acts -f json`` or ``npz``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from attnviz.activations import Activations


def activations_table(found: Activations) -> RenderableType:
    """A row per name: its shape, mean, standard deviation, least and largest number, and
    its norm at the last position kept; the positions kept, and the metric, above it."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    kept = ", ".join(str(position) for position in found.positions[:8])
    more = f" … ({len(found.positions)} in all)" if len(found.positions) > 8 else ""
    lines: list[RenderableType] = [Text(f"{found.model} · positions {kept}{more}")]
    if found.metric is not None:
        lines.append(Text(f"metric {found.metric:.4f}"))
    if found.edited:
        lines.append(Text(f"edited {', '.join(found.edited)}"))
    table = Table(box=None, header_style="bold")
    for column in ("name", "shape", "mean", "std", "min", "max", "last norm"):
        table.add_column(column, justify="left" if column == "name" else "right")
    for name, array in found.arrays().items():
        last = array[-1] if name.split("@")[0] != "pattern" else array[:, -1]
        table.add_row(
            name,
            "×".join(str(size) for size in array.shape),
            *(f"{value:.4g}" for value in (array.mean(), array.std(), array.min(), array.max())),
            f"{float((last.astype('float64') ** 2).sum() ** 0.5):.4g}",
        )
    lines.append(table)
    return Group(*lines)
