"""`attnviz show`: every selected head as a labelled heatmap, or the maps as data."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.core import BUILTIN


class ShowFormat(StrEnum):
    AUTO = "auto"  # the terminal picture
    TERMINAL = "terminal"
    JSON = "json"


def show(
    text: options.TextArgument,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    model: options.ModelOption = BUILTIN,
    layer: options.LayerOption = "all",
    head: options.HeadOption = "all",
    special: options.SpecialOption = True,
    words: options.WordsOption = False,
    download: options.DownloadOption = False,
    trust_remote_code: options.TrustRemoteCodeOption = False,
    allow_pickle: options.AllowPickleOption = False,
    verbose: options.VerboseOption = False,
    layers: options.LayersOption = None,
    heads: options.HeadsOption = None,
    d_model: options.DModelOption = None,
    seed: options.SeedOption = None,
    positions: options.PositionsOption = None,
    projections: options.ProjectionsOption = None,
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
    from attnviz.core import extract
    from attnviz.errors import UsageError
    from attnviz.io import dump_json, read_text_argument, write_text

    if output_format is not ShowFormat.JSON and output != "-":
        raise UsageError("--output goes with --format json; the terminal picture goes to stdout")
    config = options.builtin_config(
        layers=layers,
        heads=heads,
        d_model=d_model,
        seed=seed,
        positions=positions,
        projections=projections,
    )
    options.check_builtin_only(model, config, keep_case)
    text = read_text_argument(text)
    with options.loading(model):
        maps = extract(
            text,
            model=model,
            mode=mode,
            target=target,
            layers=layer,
            heads=head,
            config=config,
            lowercase=not keep_case,
            special=special,
            words=words,
            load_options=options.load_options(download, trust_remote_code, allow_pickle, verbose),
        )
    if output_format is ShowFormat.JSON:
        write_text(dump_json(maps.to_dict()), output)
        return
    from attnviz.render.terminal import render

    console = options.stdout_console(colour, width)
    console.print(
        render(maps, width=console.width, use_colour=options.uses_colour(console), values=values)
    )
