"""`attnviz render`: draw saved maps without loading any model."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.cli.export import CmapOption, DpiOption, ViewOption, VmaxOption
from attnviz.cli.show import AggregateOption, ValuesOption
from attnviz.render.image import View


def render(
    source: options.SavedArgument,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Save a picture instead (.png, .svg or .pdf); one input only.",
        ),
    ] = None,
    view: ViewOption = View.MODEL,
    aggregate: AggregateOption = None,
    values: ValuesOption = False,
    cmap: CmapOption = "viridis",
    dpi: DpiOption = 100,
    vmax: VmaxOption = 1.0,
    colour: options.ColourOption = options.ColourChoice.AUTO,
    width: options.WidthOption = None,
) -> None:
    """Draw saved maps (json, ndjson or npz; - for stdin) in the terminal or as a picture.

    No model is loaded: the maps are read from what show --format wrote.
    """
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.io import read_maps

    stream = read_maps(source)
    if aggregate is not None:
        stream = (combine(maps, aggregate) for maps in stream)
    if output is None:
        options.draw(stream, colour=colour, width=width, values=values)
        return
    from attnviz.render.image import Style, check_colormap, picture_format

    picture = picture_format(output)
    check_colormap(cmap)
    maps = options.only_one(stream)
    style = Style(cmap=cmap, dpi=dpi, values=values, vmax=vmax)
    options.save_picture(maps, view, picture, style, output)
