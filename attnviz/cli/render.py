"""`attnviz render`: draw saved maps without loading any model."""

from __future__ import annotations

from attnviz.cli import options
from attnviz.cli.show import AggregateOption, ValuesOption


def render(
    source: options.SavedArgument,
    aggregate: AggregateOption = None,
    values: ValuesOption = False,
    colour: options.ColourOption = options.ColourChoice.AUTO,
    width: options.WidthOption = None,
) -> None:
    """Draw saved maps (json, ndjson or npz; - for stdin) in the terminal.

    No model is loaded: the maps are read from what show --format wrote.
    """
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.io import read_maps

    stream = read_maps(source)
    if aggregate is not None:
        stream = (combine(maps, aggregate) for maps in stream)
    options.draw(stream, colour=colour, width=width, values=values)
