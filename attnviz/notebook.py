"""What a result offers a Python caller, drawn and written by the modules above the data:
the maps' page, pictures, files, aggregates and head statistics, and the pictures (and a
circuit's page) of head effects, a knockout, a trace, a lens and a circuit.

The results reach this module through :func:`attnviz.drawing.drawer`, by name: no
result imports it or a renderer. What it makes is byte for byte what the commands make
(``export``, ``-o``, ``--aggregate``, ``heads``, each command's ``--picture``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnviz.analysis.aggregate import aggregate
from attnviz.analysis.heads import head_statistics as statistics
from attnviz.choices import Aggregate, Output, View, chosen
from attnviz.circuits.files import read_circuit as read_circuit  # Circuit.load
from attnviz.drawing import Picture
from attnviz.errors import UsageError
from attnviz.maps_files import read_maps
from attnviz.outputs import DATA, OUTPUTS, PICTURES, output_of_file, view_for
from attnviz.render.circuit import circuit_picture
from attnviz.render.effects import effects_picture, knockout_picture, trace_picture
from attnviz.render.image import check_one_picture, one_picture
from attnviz.render.lens import lens_picture
from attnviz.render.page import circuit_notebook_html, notebook_html, page_html
from attnviz.render.style import FIGURE_OPTIONS, Style, check_colormap
from attnviz.writers import Rendering, write

if TYPE_CHECKING:
    from attnviz.analysis.effects import HeadEffects, Knockout
    from attnviz.analysis.lens import Lens
    from attnviz.analysis.trace import Trace
    from attnviz.circuits.circuit import Circuit
    from attnviz.head_columns import HeadStatistics
    from attnviz.maps import AttentionMaps


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


# The pictures of effects, a trace, a lens and a circuit, from keyword style options.


def figure_style(style: dict[str, Any]) -> Style:
    """The :class:`Style` of a figure of effects from keyword options, checked."""
    unknown = [name for name in style if name not in FIGURE_OPTIONS]
    if unknown:
        raise UsageError(
            f"{unknown[0]}: a figure of effects takes {', '.join(FIGURE_OPTIONS)} (its colours "
            "are a diverging scale centred on 0)"
        )
    if "figsize" in style and style["figsize"] is not None:
        style = {**style, "figsize": tuple(style["figsize"])}
    return Style(**style)


def _figure(
    draw: Callable[[Output, Style], bytes], format: Output | str, style: dict[str, Any]
) -> Picture:
    """What ``draw`` makes in ``format`` with keyword ``style``, both checked, as a Picture."""
    kind = chosen(Output, format, "picture format", among=PICTURES)
    return Picture(draw(kind, figure_style(style)), kind)


def effects_figure(
    found: HeadEffects, column: str | None, format: Output | str, style: dict[str, Any]
) -> Picture:
    """:meth:`HeadEffects.picture`: the grid of ``column`` (by default patch where there is
    one, else ablation)."""
    column = column or found.drawn_column()
    if column not in ("ablation", "dla", "patch"):
        raise UsageError(f"a head's effects are ablation, dla and patch, not {column!r}")
    return _figure(partial(effects_picture, found, column, ""), format, style)


def trace_figure(trace: Trace, format: Output | str, style: dict[str, Any]) -> Picture:
    """:meth:`Trace.picture`."""
    return _figure(partial(trace_picture, trace), format, style)


def knockout_figure(knockout: Knockout, format: Output | str, style: dict[str, Any]) -> Picture:
    """:meth:`Knockout.picture`."""
    return _figure(partial(knockout_picture, knockout), format, style)


def save_figure(path: str | Path, draw: Callable[[Output], Picture]) -> None:
    """A figure written whole to ``path``, in the format its suffix names."""
    draw(output_of_file(path, PICTURES)).save(path)


def lens_figure(lens: Lens, format: Output | str, style: dict[str, Any]) -> Picture:
    """:meth:`Lens.picture`."""
    return _figure(partial(lens_picture, lens), format, style)


def circuit_figure(circuit: Circuit, format: Output | str, style: dict[str, Any]) -> Picture:
    """:meth:`Circuit.picture`."""
    return _figure(partial(circuit_picture, circuit), format, style)


def circuit_page(circuit: Circuit) -> str:
    """A notebook's output of a circuit: its header, then its own page in an iframe."""
    return circuit_notebook_html(circuit)


def read_one(path: str | Path) -> AttentionMaps:
    """The maps of a file that holds one input's (:meth:`AttentionMaps.read`)."""
    found = read_maps(str(path))
    first = next(found)
    if next(found, None) is not None:
        raise UsageError(f"{path} holds the maps of several inputs: use attnviz.read_maps")
    return first
