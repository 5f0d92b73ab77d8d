"""`attnviz models`: which models can be used offline right now."""

from __future__ import annotations

from attnviz.atomic_files import write_text
from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli.declarations import ColourChoice
from attnviz.cli.environment import NO_TERMINAL, Environment, stdout_console, with_environment
from attnviz.safe_text import display_label
from attnviz.schema import envelope

FormatOption = d.format_option(
    d.ReportFormat,
    "table, or json for scripts.",
)


@with_environment
def models(
    output_format: FormatOption = Output.TABLE,
    environment: Environment = NO_TERMINAL,
) -> None:
    """List the model aliases and the models usable offline right now.

    Besides these, --model takes any directory saved with save_pretrained.
    """
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.data_formats import dump_json
    from attnviz.pretrained import available_models

    found = available_models()
    if output_format is Output.JSON:
        rows = [
            {
                "name": model.name,
                "description": model.description,
                "offline": model.location is not None,
                "location": model.location,
                "converted": model.converted,
                "terms": model.terms or None,
            }
            for model in found
        ]
        write_text(dump_json(envelope({"models": rows})), "-")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("model", no_wrap=True)
    table.add_column("what")
    table.add_column("usable offline", overflow="fold")
    table.add_row("builtin", "the built-in seeded stack, no download (builtin:seed=1, …)", "yes")
    for model in found:
        status = f"yes: {model.location}" if model.location else f"no: {model.hint}"
        if model.location and model.hint:  # where it will be
            status += f" ({model.hint})"
        what = f"{model.description}; {model.terms}" if model.terms else model.description
        table.add_row(display_label(model.name), what, display_label(status))
    stdout_console(ColourChoice.AUTO, None, environment).print(table)
