"""`attnviz show`: every selected head as a labelled heatmap, or the maps as data."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.core import Mode


class ShowFormat(StrEnum):
    AUTO = "auto"  # the terminal picture
    TERMINAL = "terminal"
    JSON = "json"


def show(
    text: options.TextArgument,
    mode: options.ModeOption = Mode.SELF,
    target: options.TargetOption = None,
    layer: options.LayerOption = "all",
    head: options.HeadOption = "all",
    layers: options.LayersOption = 2,
    heads: options.HeadsOption = 4,
    d_model: options.DModelOption = 64,
    seed: options.SeedOption = 0,
    positions: options.PositionsOption = True,
    projections: options.ProjectionsOption = options.Projections.LEARNED,
    keep_case: options.KeepCaseOption = False,
    values: Annotated[
        bool,
        typer.Option(
            "--values", rich_help_panel=options.OUTPUT_PANEL, help="Print the weights in the cells."
        ),
    ] = False,
    output_format: Annotated[
        ShowFormat,
        typer.Option(
            "--format",
            "-f",
            case_sensitive=False,
            rich_help_panel=options.OUTPUT_PANEL,
            help="terminal: heatmaps. json: the AttentionMaps document (schema version 1).",
        ),
    ] = ShowFormat.AUTO,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            rich_help_panel=options.OUTPUT_PANEL,
            help="Where --format json goes: a file, or - for standard output.",
        ),
    ] = "-",
    colour: options.ColourOption = options.ColourChoice.AUTO,
    width: options.WidthOption = None,
) -> None:
    """Show what every attention head attends to: a heatmap per head.

    Rows are query tokens, columns key tokens; each row sums to 1. Panels sit
    side by side as the width allows. A wide input is drawn with narrower cells
    and, when even those do not fit, with neighbouring tokens pooled into one
    cell; the picture says so. Data goes to stdout, messages to stderr.
    """
    from attnviz.builtin import BuiltinConfig
    from attnviz.core import extract
    from attnviz.errors import UsageError
    from attnviz.io import dump_json, read_text_argument, write_text

    try:
        config = BuiltinConfig(
            layers=layers,
            heads=heads,
            d_model=d_model,
            seed=seed,
            positions=positions,
            projections=projections.value,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    maps = extract(
        read_text_argument(text),
        mode=mode,
        target=target,
        layers=layer,
        heads=head,
        config=config,
        lowercase=not keep_case,
    )
    if output_format is ShowFormat.JSON:
        write_text(dump_json(maps.to_dict()), output)
        return
    if output != "-":
        raise UsageError("--output goes with --format json; the terminal picture goes to stdout")
    from attnviz.render.terminal import render

    console = options.stdout_console(colour, width)
    console.print(
        render(maps, width=console.width, use_colour=options.uses_colour(console), values=values)
    )
