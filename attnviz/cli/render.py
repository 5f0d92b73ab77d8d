"""`attnviz render`: draw saved maps without loading any model."""

from __future__ import annotations

from attnviz.choices import Output, View
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.option_kinds import output_option
from attnviz.cli.pictures import picture_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.outputs import PICTURES, output_of_file, refuse_inapplicable
from attnviz.writers import Rendering, write


@sharing(picture_settings)
def render(
    source: d.SavedArgument,
    output: output_option(
        "Save a picture instead (.png, .svg or .pdf), or the interactive page (.html); "
        "one input only."
    ) = None,
    view: d.RenderViewOption = None,
    layer: d.LayerOption = "all",
    head: d.HeadOption = "all",
    aggregate: d.AggregateOption = None,
    label_positions: d.LabelPositionsOption = False,
    colour: d.ColourOption = d.ColourChoice.AUTO,
    width: d.WidthOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Draw saved maps (json, ndjson or npz; - for stdin) in the terminal or as a picture.

    No model is loaded: the maps are read from what show --format wrote.
    """
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.maps_files import read_maps

    drawn = Output.TERMINAL if output is None else output_of_file(output, (*PICTURES, Output.HTML))
    given = [*shared.picture.given(), *([f"--view {view}"] if view is not None else [])]
    given += [f"--color {colour.value}"] if colour is not d.ColourChoice.AUTO else []
    given += ["--width"] if width is not None else []
    view = view or (View.AUTO if drawn is Output.TERMINAL else View.MODEL)
    refuse_inapplicable(given, [drawn], view)
    stream = read_maps(source)
    if (layer, head) != ("all", "all"):
        stream = (out.select_held(maps, layer, head) for maps in stream)
    if aggregate is not None:
        stream = (combine(maps, aggregate) for maps in stream)
    if output is None:
        if label_positions:
            stream = (maps.with_positions() for maps in stream)
        out.draw(
            stream,
            colour=colour,
            width=width,
            values=shared.picture.values,
            environment=shared.environment,
            view=view,
        )
        return
    maps = out.only_one(stream, out.ONE_MAPS)
    how = Rendering(
        view,
        shared.picture.style(),
        label_positions=label_positions,
        title=shared.picture.title or "",
    )
    write([maps], drawn, output, how)
