"""What attention maps offer a Python caller beyond their data: their page, pictures and
files, aggregates and head statistics. Each is made by :mod:`attnviz.notebook`, which sits
above the maps, reached through :func:`attnviz.drawing.drawer`.

:class:`MapsConveniences` is a part of :class:`~attnviz.maps.AttentionMaps`, kept apart by
concern: the maps' own module holds what they are; this one, what they offer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from attnviz.choices import Aggregate, Output, View
from attnviz.drawing import drawer

if TYPE_CHECKING:
    from attnviz.drawing import Picture
    from attnviz.head_columns import HeadStatistics


class MapsConveniences:
    """The notebook conveniences of :class:`~attnviz.maps.AttentionMaps`."""

    def to_html(self, view: View | str = "model") -> str:
        """The interactive page as one self-contained HTML string, opening on ``view`` as
        ``export --view VIEW -o page.html`` does: save it, share it, open it offline."""
        return drawer().page(self, view)

    def aggregated(self, method: Aggregate | str) -> Self:
        """The maps combined, as ``--aggregate`` combines them: ``"mean"`` or ``"max"`` of
        each layer's heads, ``"mean-all"``, ``"max-all"``, ``"rollout"`` or ``"flow"``
        over the layers held."""
        return drawer().aggregated(self, method)

    def head_statistics(self) -> list[HeadStatistics]:
        """A row per head, as ``attnviz heads`` lists them: every column of
        :class:`attnviz.head_columns.HeadColumn` (``row.entropy``, ``row["sink"]``)."""
        return drawer().head_statistics(self)

    def picture(
        self,
        view: View | str = "model",
        format: Output | str = "png",
        *,
        layer: int | None = None,
        head: int | None = None,
        **style: Any,
    ) -> Picture:
        """The picture ``attnviz export`` draws: ``view`` ``"model"`` (every map held),
        ``"layer"`` (one layer's heads) or ``"head"`` (one map); ``layer`` and ``head``
        pick maps by model index. ``style``: ``cmap``, ``dpi``, ``values``, ``vmax``,
        ``figsize``, ``font_size``, ``title``, as the options of the same names.
        ``.data`` holds the bytes; a notebook shows PNG and SVG inline."""
        return drawer().picture(self, view, format, layer, head, style)

    def save(
        self,
        path: str | Path,
        view: View | str = "model",
        *,
        layer: int | None = None,
        head: int | None = None,
        **style: Any,
    ) -> None:
        """Write the maps to ``path`` in the format of its suffix, as ``-o`` does: a
        picture (.png, .svg, .pdf: :meth:`picture`), the interactive page (.html) or
        data (.json, .ndjson, .npz, .csv), complete or not at all. ``layer`` and
        ``head`` pick maps by model index."""
        drawer().save(self, path, view, layer, head, style)

    def _repr_html_(self) -> str:
        """A notebook output: the interactive page in an iframe (no require.js, nothing
        fetched), bounded in size."""
        return drawer().framed_page(self)

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """The maps saved in a .json or .npz file (or a one-line .ndjson file) by
        :meth:`save` or ``attnviz show -o``; ``attnviz.read_maps`` reads every line."""
        return drawer().read_one(path)
