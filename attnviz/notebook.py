"""What :class:`~attnviz.maps.AttentionMaps` offers a notebook, drawn and written by the
modules above the data: the page, pictures, files, aggregates and head statistics.

The methods of ``AttentionMaps`` reach this module lazily, from this one place;
the data type itself imports nothing above it. The results are byte for byte what
the commands make (``export``, ``-o``, ``--aggregate``, ``heads``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnviz.analysis.aggregate import aggregate
from attnviz.analysis.heads import head_statistics as statistics
from attnviz.choices import Aggregate, Output, View, chosen
from attnviz.errors import UsageError
from attnviz.outputs import DATA, OUTPUTS, PICTURES, output_of_file, view_for
from attnviz.render.image import Picture, check_one_picture, one_picture
from attnviz.render.page import notebook_html, page_html
from attnviz.render.style import Style, check_colormap
from attnviz.writers import Rendering, write

if TYPE_CHECKING:
    from attnviz.analysis.heads import HeadStatistics
    from attnviz.maps import AttentionMaps
    from attnviz.render.image import Picture


def page(maps: AttentionMaps, view: View | str) -> str:
    """The interactive page, opening on ``view`` (head, layer or model) as export's."""
    return page_html(maps, view=view)


def framed_page(maps: AttentionMaps) -> str:
    """The page in an iframe, bounded in size: a notebook cell's output."""
    return notebook_html(maps)


def aggregated(maps: AttentionMaps, method: Aggregate | str) -> AttentionMaps:
    return aggregate(maps, method)


def head_statistics(maps: AttentionMaps) -> list[HeadStatistics]:
    return statistics(maps)


def picture(
    maps: AttentionMaps,
    view: View | str,
    format: Output | str,
    layer: int | None,
    head: int | None,
    style: dict[str, Any],
) -> Picture:
    """What ``export`` draws of the maps of ``layer`` and ``head`` (None: all held)."""
    drawn = Style(**style)
    check_colormap(drawn.cmap)
    selected = maps._picked(layer, head)
    kind = chosen(Output, format, "picture format", among=PICTURES)
    return Picture(one_picture(selected, view_for(view, kind), kind, drawn), kind)


def save(
    maps: AttentionMaps,
    path: str | Path,
    view: View | str,
    layer: int | None,
    head: int | None,
    style: dict[str, Any],
) -> None:
    """The maps written in the format of the suffix of ``path``, as ``-o`` writes it."""
    output = output_of_file(path, (*PICTURES, Output.HTML, *DATA))
    if style and output not in PICTURES:
        raise UsageError(f"{', '.join(style)}: style options are for pictures, not {output.value}")
    drawn = Style(**style)
    check_colormap(drawn.cmap)
    selected = maps._picked(layer, head)
    shown = view_for(view, output) if OUTPUTS[output].views else View.MODEL
    if output in PICTURES:
        check_one_picture(selected, shown)
    write([selected], output, path, Rendering(shown, drawn))
