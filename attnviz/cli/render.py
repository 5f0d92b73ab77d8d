"""`attnviz render`: draw saved maps without loading any model."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.choices import View
from attnviz.cli import declarations as d
from attnviz.cli.output import NO_TERMINAL, Environment, with_environment
from attnviz.cli.pictures import DEFAULT_PICTURE, PictureSettings, picture_settings
from attnviz.errors import UsageError


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
    view: d.RenderViewOption = None,
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
    from attnviz.maps import read_maps

    in_terminal = {member.value for member in d.TerminalView}
    if output is None and view is not None and view.value not in in_terminal:
        raise UsageError(
            f"--view {view.value} is a picture's view: give -o FILE (.png, .svg, .pdf or "
            ".html), or use --view panels or grid in the terminal"
        )
    if output is not None and view is not None and view.value in in_terminal:
        raise UsageError(
            f"--view {view.value} draws in the terminal: leave out -o, or use --view head, "
            "layer or model for a picture"
        )
    picture_kind = None if output is None else out.picture_or_page(output)  # None: the page
    if output is None:
        picture.check_drawn("the terminal picture", values_drawn=True)
    elif picture_kind is None:
        picture.check_drawn("the interactive page (.html)")
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
            view=d.TerminalView(view or d.TerminalView.AUTO),
        )
        return
    drawn = View(view or View.MODEL)
    if picture_kind is None:
        out.save_page(out.only_one(stream, out.ONE_MAPS), drawn, output, picture.title)
        return
    style = picture.style()
    out.save_picture(out.only_one(stream, out.ONE_MAPS), drawn, picture_kind, style, output)
