"""`attnviz render`: draw saved maps without loading any model."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.choices import View
from attnviz.cli import declarations as d
from attnviz.cli.output import NO_TERMINAL, Environment, with_environment
from attnviz.cli.pictures import DEFAULT_PICTURE, PictureSettings, picture_settings


@picture_settings
@with_environment
def render(
    source: d.SavedArgument,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Save a picture instead (.png, .svg or .pdf), or the interactive page (.html); "
            "one input only.",
        ),
    ] = None,
    view: d.ViewOption = View.MODEL,
    layer: d.LayerOption = "all",
    head: d.HeadOption = "all",
    aggregate: d.AggregateOption = None,
    label_positions: d.LabelPositionsOption = False,
    colour: d.ColourOption = d.ColourChoice.AUTO,
    width: d.WidthOption = None,
    environment: Environment = NO_TERMINAL,
    picture: PictureSettings = DEFAULT_PICTURE,
) -> None:
    """Draw saved maps (json, ndjson or npz; - for stdin) in the terminal or as a picture.

    No model is loaded: the maps are read from what show --format wrote.
    """
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.cli import output as out
    from attnviz.io import read_maps

    stream = read_maps(source)
    if (layer, head) != ("all", "all"):
        stream = (out.select_held(maps, layer, head) for maps in stream)
    if aggregate is not None:
        stream = (combine(maps, aggregate) for maps in stream)
    if label_positions:
        stream = (maps.with_positions() for maps in stream)
    if output is None:
        out.draw(
            stream,
            colour=colour,
            width=width,
            values=picture.values,
            environment=environment,
            view=d.TerminalView.AUTO,
        )
        return
    if out.is_page(output):
        out.save_page(out.only_one(stream, out.ONE_MAPS), view, output, picture.title)
        return
    from attnviz.render.image import picture_format

    picture_kind = picture_format(output)
    style = picture.style()
    out.save_picture(out.only_one(stream, out.ONE_MAPS), view, picture_kind, style, output)
