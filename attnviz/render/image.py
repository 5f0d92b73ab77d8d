"""Pictures of attention maps: PNG, SVG and PDF.

Three views: one head (a heatmap with labelled rows and columns, a colour bar
and a title), one layer (its heads in a grid) and the model (every layer ×
head as small multiples). A :class:`Painter` draws them, keeping a canvas
(:mod:`attnviz.render.canvas`) per map shape and style: single-head PNGs are what
batches produce by the thousand, and laying out a canvas is the slow part.

Colours run from 0 to 1 in every picture, so pictures can be compared; for
long inputs, where every weight is small, ``vmax`` lowers the top of the scale.
Value-weighted maps (``--weigh value``) have no top of their own: their colours run
to their largest value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from attnviz.choices import Output, View
from attnviz.errors import UsageError, warn
from attnviz.panels import notes_of, panels_of, query_labels_of
from attnviz.render.canvas import HeadCanvas
from attnviz.render.figures import warn_missing
from attnviz.render.grid_canvas import GridCanvas
from attnviz.render.layout import GridShape, grid_shape
from attnviz.render.style import MAX_LABEL, VALUES_UP_TO, Frame, Style, token_label

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel


class Painter:
    """Draws pictures of maps, keeping a canvas per map shape and style: a batch draws
    thousands of maps of a few shapes, and laying out a canvas is the slow part.

    Whoever renders owns a painter (a command, a batch worker); nothing is kept
    between painters.
    """

    def __init__(self, max_canvases: int = 64) -> None:
        self.max_canvases = max_canvases
        self.canvases: dict[tuple[int, int, Style, int], HeadCanvas] = {}
        self.grids: dict[tuple[GridShape, Style], GridCanvas] = {}
        self.missing_glyphs: set[str] = set()  # drawn as boxes by the grid views
        self.reported: set[str] = set()  # missing characters already warned about, once each
        self.told_values_too_large = False  # --values for a map too large: warned once

    def head_canvas(
        self, queries: int, keys: int, style: Style, label_chars: int = MAX_LABEL
    ) -> HeadCanvas:
        key = (queries, keys, style, label_chars)
        if key not in self.canvases:
            if len(self.canvases) >= self.max_canvases:  # forget the oldest, not grow
                self.canvases.pop(next(iter(self.canvases)))
            self.canvases[key] = HeadCanvas(queries, keys, style, label_chars)
        return self.canvases[key]

    def grid_picture(
        self,
        maps: AttentionMaps,
        picture: Output,
        style: Style,
        panels: Sequence[MapPanel] | None = None,
    ) -> bytes:
        """The maps (or the chosen ``panels``) as small multiples: a row per layer, a column
        per head; a single layer's heads, and chosen panels, wrap into rows of six."""
        shown = list(panels_of(maps)) if panels is None else list(panels)
        key = (grid_shape(maps, panels, style.figsize), style)
        if key not in self.grids:
            if len(self.grids) >= self.max_canvases:
                self.grids.pop(next(iter(self.grids)))
            self.grids[key] = GridCanvas(*key)
        canvas = self.grids[key]
        if picture is Output.PNG:
            return canvas.png(maps, shown)
        return canvas.vector(maps, shown, picture)

    def head_picture(
        self, maps: AttentionMaps, panel: MapPanel, picture: Output, style: Style
    ) -> bytes:
        """One map of ``maps`` as picture bytes."""
        frame = Frame(
            header=style.titles(f"{maps.model} · {maps.mode} attention{notes_of(maps)}"),
            query_labels=tuple(query_labels_of(maps)),
            key_labels=tuple(maps.key_tokens),
        )
        label_chars = MAX_LABEL  # the margins of a given size fit this input's labels
        if style.figsize is not None:
            labels = (*frame.query_labels, *frame.key_labels)
            label_chars = max((len(token_label(label)) for label in labels), default=1)
        queries, keys = len(frame.query_labels), len(frame.key_labels)
        if style.values and max(queries, keys) > VALUES_UP_TO and not self.told_values_too_large:
            warn(
                f"--values: a {queries} × {keys} map is drawn without numbers; they fit maps "
                f"up to {VALUES_UP_TO} × {VALUES_UP_TO}"
            )
            self.told_values_too_large = True
        canvas = self.head_canvas(queries, keys, style, label_chars)
        title = "" if style.title == "" else panel.title
        if picture is Output.PNG:
            return canvas.png(panel.matrix, frame, title)
        return canvas.vector(panel.matrix, frame, title, picture)

    def files(
        self,
        maps: AttentionMaps,
        view: View,
        picture: Output,
        style: Style,
        panels: Sequence[MapPanel] | None = None,
    ) -> Iterator[tuple[str, bytes]]:
        """The pictures of one input for a view: (name suffix, bytes) pairs.

        head: one per map, suffix ``-L{layer}-H{head}``; layer: one per layer,
        ``-L{layer}``; model: one in all, no suffix. ``panels`` draws only those
        maps, in that order (the heads worth looking at first). Value-weighted maps are
        drawn on a colour scale of their own (:meth:`Style.for_maps`).
        """
        style = style.for_maps(maps)
        if panels is None:
            yield from self._pictures(maps, view, picture, style)
        else:
            yield from self._chosen(maps, view, picture, style, panels)
        missing = set(self.missing_glyphs).union(
            *(canvas.missing_glyphs for canvas in self.canvases.values()),
            *(canvas.missing_glyphs for canvas in self.grids.values()),
        )
        if missing - self.reported:  # one warning line per character, however many inputs
            warn_missing(missing - self.reported)
            self.reported |= missing

    def _chosen(
        self,
        maps: AttentionMaps,
        view: View,
        picture: Output,
        style: Style,
        panels: Sequence[MapPanel],
    ) -> Iterator[tuple[str, bytes]]:
        if view is View.MODEL:
            yield "", self.grid_picture(maps, picture, style, panels)
        elif view is View.LAYER:
            for layer in dict.fromkeys(panel.layer for panel in panels):
                own = [panel for panel in panels if panel.layer == layer]
                yield f"-L{layer}", self.grid_picture(maps, picture, style, own)
        else:
            for panel in panels:
                suffix = f"-L{panel.layer}-H{panel.head}"
                yield suffix, self.head_picture(maps, panel, picture, style)

    def _pictures(
        self, maps: AttentionMaps, view: View, picture: Output, style: Style
    ) -> Iterator[tuple[str, bytes]]:
        layer_count = maps.weights.shape[0]
        if view is View.MODEL:
            yield "", self.grid_picture(maps, picture, style)
            return
        if view is View.LAYER:
            for i in range(layer_count):
                layer = maps.layers[i] if layer_count == len(maps.layers) else None
                part = maps.replace(
                    weights=maps.weights[i : i + 1],
                    layers=[layer] if layer is not None else maps.layers,
                )
                suffix = f"-L{layer}" if layer is not None else ""
                yield suffix, self.grid_picture(part, picture, style)
            return
        for panel in panels_of(maps):
            suffix = "".join(
                f"-{letter}{index}"
                for letter, index in (("L", panel.layer), ("H", panel.head))
                if index is not None
            )
            yield suffix, self.head_picture(maps, panel, picture, style)


def one_picture(maps: AttentionMaps, view: View, picture: Output, style: Style) -> bytes:
    """The one picture of ``maps`` that ``view`` draws: the model view of any maps, the
    layer view of one layer's, the head view of one map."""
    check_one_picture(maps, view)
    ((_, data),) = Painter().files(maps, view, picture, style)
    return data


def check_one_picture(maps: AttentionMaps, view: View) -> None:
    """The head view draws one map and the layer view one layer: a usage error else."""
    layers, heads = maps.map_grid
    if view is View.HEAD and layers * heads != 1:
        raise UsageError(
            f"the head view draws one map, but these maps hold {layers * heads}: "
            "give a layer and a head"
        )
    if view is View.LAYER and layers != 1:
        raise UsageError(f"the layer view draws one layer, but these maps hold {layers}")
