"""`attnviz show`: every selected head as a labelled heatmap, or the maps as data."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated

import typer

from attnviz.cli import declarations as d
from attnviz.cli.output import NO_TERMINAL, Environment, with_environment
from attnviz.cli.settings import DEFAULT_SETTINGS, ModelSettings, model_settings


class ShowFormat(StrEnum):
    AUTO = "auto"  # the suffix of -o; else a picture for a terminal, NDJSON for a pipe
    TERMINAL = "terminal"
    JSON = "json"
    NDJSON = "ndjson"
    NPZ = "npz"
    CSV = "csv"
    PNG = "png"  # the model view, as `export` draws it
    SVG = "svg"
    PDF = "pdf"


_PICTURES = (ShowFormat.PNG, ShowFormat.SVG, ShowFormat.PDF)
_SUFFIXES = {".jsonl": ShowFormat.NDJSON, **{f".{f.value}": f for f in ShowFormat}}


def _format_of(output: str) -> ShowFormat | None:
    """The format a file name says it holds (``maps.npz``: npz), if it says one."""
    if output == d.STDIO:
        return None
    found = _SUFFIXES.get(os.path.splitext(output)[1].lower())
    return None if found in (ShowFormat.AUTO, ShowFormat.TERMINAL) else found


@model_settings
@with_environment
def show(
    text: d.TextArgument,
    mode: d.ModeOption = None,
    target: d.TargetOption = None,
    model: d.ModelOption = d.BUILTIN,
    layer: d.LayerOption = "all",
    head: d.HeadOption = "all",
    aggregate: d.AggregateOption = None,
    values: d.ValuesOption = False,
    output_format: Annotated[
        ShowFormat,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            case_sensitive=False,
            rich_help_panel=d.OUTPUT_PANEL,
            help="terminal: heatmaps. json: one AttentionMaps document. ndjson: one document per "
            "line, streamed. npz: numpy arrays. csv: a row per weight. png, svg, pdf: the model "
            "view as export draws it. auto: what the suffix of --output says, else terminal "
            "when stdout is a terminal, else ndjson.",
        ),
    ] = ShowFormat.AUTO,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            rich_help_panel=d.OUTPUT_PANEL,
            help="Where data formats go: a file (written whole or not at all), or - for stdout.",
        ),
    ] = d.STDIO,
    dtype: d.DtypeOption = d.Dtype.FLOAT32,
    colour: d.ColourOption = d.ColourChoice.AUTO,
    width: d.WidthOption = None,
    environment: Environment = NO_TERMINAL,
    settings: ModelSettings = DEFAULT_SETTINGS,
) -> None:
    """Show what every attention head attends to: a heatmap per head.

    Rows are query tokens, columns key tokens; each row sums to 1. Panels sit
    side by side as the width allows. A wide input is drawn with narrower cells
    and, when even those do not fit, with neighbouring tokens pooled into one
    cell; the picture says so. With TEXT -, every line of stdin is one input,
    answered as soon as it is read. Data goes to stdout, messages to stderr.
    """
    from attnviz.choices import DataFormat
    from attnviz.cli import output as out
    from attnviz.cli.settings import request
    from attnviz.errors import UsageError

    if output_format is ShowFormat.TERMINAL and output != d.STDIO:
        raise UsageError("--output goes with a data --format; the terminal picture goes to stdout")
    by_suffix = _format_of(output)
    if output_format is ShowFormat.AUTO and by_suffix is not None:
        output_format = by_suffix  # -o maps.npz writes npz
    elif by_suffix is not None and by_suffix is not output_format:
        raise UsageError(
            f"--format {output_format.value} and the suffix of {output} ({by_suffix.value}) "
            "disagree: drop --format, or name the file for what it holds"
        )
    if output_format is ShowFormat.AUTO:
        terminal = environment.stdout_is_terminal
        output_format = ShowFormat.TERMINAL if terminal else ShowFormat.NDJSON
    asked = request(
        model=model, mode=mode, layer=layer, head=head, settings=settings, text=text, target=target
    )
    extractor = asked.open(environment)
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.io import read_texts, write_maps

    stream = (extractor.extract(line, target=target, **asked.options) for line in read_texts(text))
    if aggregate is not None:
        stream = (combine(maps, aggregate) for maps in stream)
    if output_format in _PICTURES:
        from attnviz.choices import PictureFormat, View
        from attnviz.render.image import Style

        picture = PictureFormat(output_format.value)
        out.save_picture(out.only_one(stream), View.MODEL, picture, Style(), output)
        return
    if output_format is not ShowFormat.TERMINAL:
        stream = (maps.astype(dtype) for maps in stream)
        write_maps(stream, DataFormat(output_format.value), output)
        return
    out.draw(stream, colour=colour, width=width, values=values, environment=environment)
