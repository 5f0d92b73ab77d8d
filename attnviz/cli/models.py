"""`attnviz models`: which models can be used offline right now."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.cli.declarations import ReportFormat


def models(
    output_format: Annotated[
        ReportFormat,
        typer.Option("--format", "-f", case_sensitive=False, help="table, or json for scripts."),
    ] = ReportFormat.TABLE,
) -> None:
    """List the model aliases and the models usable offline right now.

    Besides these, --model takes any directory saved with save_pretrained.
    """
    from attnviz.io import dump_json, write_text
    from attnviz.pretrained import available_models
    from attnviz.schema import envelope

    found = available_models()
    if output_format is ReportFormat.JSON:
        rows = [
            {
                "name": model.name,
                "description": model.description,
                "offline": model.location is not None,
                "location": model.location,
            }
            for model in found
        ]
        write_text(dump_json(envelope({"models": rows})), "-")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("model", no_wrap=True)
    table.add_column("what")
    table.add_column("usable offline", overflow="fold")
    table.add_row("builtin", "the built-in seeded stack, no download", "yes")
    for model in found:
        status = f"yes: {model.location}" if model.location else f"no: {model.hint}"
        table.add_row(model.name, model.description, status)
    Console(markup=False, highlight=False, emoji=False).print(table)
