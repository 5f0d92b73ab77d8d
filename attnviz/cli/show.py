"""`attnviz show`: every selected head as a labelled heatmap, or the maps as data."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from attnviz.analysis.aggregate import Aggregate
from attnviz.cli import options
from attnviz.core import BUILTIN
from attnviz.io import STDIO


class ShowFormat(StrEnum):
    AUTO = "auto"  # a picture for a terminal, NDJSON for a pipe or file
    TERMINAL = "terminal"
    JSON = "json"
    NDJSON = "ndjson"
    NPZ = "npz"
    CSV = "csv"


FormatOption = Annotated[
    ShowFormat,
    typer.Option(
        "--format",
        "-f",
        case_sensitive=False,
        rich_help_panel=options.OUTPUT_PANEL,
        help="terminal: heatmaps. json: one AttentionMaps document. ndjson: one document per "
        "line, streamed. npz: numpy arrays. csv: a row per weight. auto: terminal when stdout "
        "is a terminal, else ndjson.",
    ),
]
OutputOption = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        rich_help_panel=options.OUTPUT_PANEL,
        help="Where data formats go: a file (written whole or not at all), or - for stdout.",
    ),
]
AggregateOption = Annotated[
    Aggregate | None,
    typer.Option(
        "--aggregate",
        "-a",
        case_sensitive=False,
        rich_help_panel=options.SELECTION_PANEL,
        help="Combine the selected maps. mean, max: over heads, a map per layer. mean-all, "
        "max-all: over layers and heads. rollout: attention rollout (Abnar & Zuidema 2020), the "
        "product of head-mean maps with the residual folded in (0.5·A + 0.5·I). flow: "
        "attention flow as maximum flow, up to 64 tokens.",
    ),
]
ValuesOption = Annotated[
    bool,
    typer.Option(
        "--values", rich_help_panel=options.OUTPUT_PANEL, help="Print the weights in the cells."
    ),
]


@options.model_settings
def show(
    text: options.TextArgument,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    model: options.ModelOption = BUILTIN,
    layer: options.LayerOption = "all",
    head: options.HeadOption = "all",
    aggregate: AggregateOption = None,
    values: ValuesOption = False,
    output_format: FormatOption = ShowFormat.AUTO,
    output: OutputOption = STDIO,
    dtype: options.DtypeOption = options.Dtype.FLOAT32,
    colour: options.ColourOption = options.ColourChoice.AUTO,
    width: options.WidthOption = None,
    settings: options.ModelSettings = options.DEFAULT_SETTINGS,
) -> None:
    """Show what every attention head attends to: a heatmap per head.

    Rows are query tokens, columns key tokens; each row sums to 1. Panels sit
    side by side as the width allows. A wide input is drawn with narrower cells
    and, when even those do not fit, with neighbouring tokens pooled into one
    cell; the picture says so. With TEXT -, every line of stdin is one input,
    answered as soon as it is read. Data goes to stdout, messages to stderr.
    """
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.errors import UsageError
    from attnviz.io import DataFormat, read_texts, write_maps

    if output_format is ShowFormat.AUTO:
        output_format = ShowFormat.TERMINAL if sys.stdout.isatty() else ShowFormat.NDJSON
    if output_format is ShowFormat.TERMINAL and output != STDIO:
        raise UsageError("--output goes with a data --format; the terminal picture goes to stdout")
    extract = options.extraction(model=model, mode=mode, layer=layer, head=head, settings=settings)
    extract.prepare()
    stream = (extract(line, target) for line in read_texts(text))
    if aggregate is not None:
        stream = (combine(maps, aggregate) for maps in stream)
    if output_format is not ShowFormat.TERMINAL:
        stream = (maps.astype(dtype.value) for maps in stream)
        write_maps(stream, DataFormat(output_format.value), output)
        return
    options.draw(stream, colour=colour, width=width, values=values)
