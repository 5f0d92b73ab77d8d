"""How pictures look (:class:`Style`), what one input's pictures share (:class:`Frame`),
and the words they are labelled with. No matplotlib at import."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

from attnviz.errors import UsageError
from attnviz.safe_text import spaces_shown

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps

# What a figure of effects (heads, traces, knockouts, needles) takes of a Style: its
# colours are its own (a diverging scale centred on 0), whatever the maps' colour map.
FIGURE_OPTIONS = ("dpi", "figsize", "font_size", "title")
MAX_LABEL = 14  # characters of a token label before it is cut with an ellipsis
VALUES_UP_TO = 16  # --values prints numbers in maps with at most this many rows and columns
MIN_LABEL_POINTS = 6.0  # token labels are never smaller: they are thinned instead


@dataclass(frozen=True)
class Style:
    cmap: str = "viridis"
    dpi: int = 100
    values: bool = False  # weights printed in the cells of small maps
    vmax: float = 1.0  # the top of the colour scale, a fraction of scale; lower it for long inputs
    figsize: tuple[float, float] | None = None  # inches; None: sized by the map
    font_size: float | None = None  # points for labels and titles; None: as the cells allow
    title: str | None = None  # the figure's title; None: the model and mode; "": no titles
    # What the whole colour scale stands for: 1 for attention weights; for value-weighted
    # maps, which have no top of their own, their largest value. Set per input by
    # :meth:`for_maps`, never chosen: :meth:`chosen` leaves them out.
    scale: float = field(default=1.0, metadata={"per_input": True})
    weighted: bool = field(default=False, metadata={"per_input": True})

    def __post_init__(self) -> None:  # what the command line's options hold to as well
        if not 0 < self.vmax <= 1:
            raise UsageError(f"vmax {self.vmax} is outside the weights' range: give 0 < vmax <= 1")
        if self.dpi <= 0 or (self.font_size is not None and self.font_size <= 0):
            raise UsageError("dpi and font_size are positive numbers")
        if self.figsize is not None and not all(0 < size <= 100 for size in self.figsize):
            raise UsageError(f"figsize {self.figsize}: two sizes in inches, each up to 100")

    def chosen(self) -> dict[str, object]:
        """The style as the user chose it (a batch's manifest records it)."""
        return {
            part.name: getattr(self, part.name)
            for part in fields(self)
            if not part.metadata.get("per_input")
        }

    def titles(self, default: str) -> str:
        return default if self.title is None else self.title

    def for_maps(self, maps: AttentionMaps) -> Style:
        """The style of one input's pictures: value-weighted maps get a colour scale of
        their own, up to their largest value (times vmax)."""
        if maps.weighting is None:
            return self
        largest = float(maps.weights.max(initial=0.0))
        return replace(self, scale=largest if largest > 0 else 1.0, weighted=True)

    @property
    def top(self) -> float:
        """The value drawn in the top colour."""
        return self.vmax * self.scale

    @property
    def clips(self) -> bool:
        """Weights above vmax are drawn in the top colour: the colour bar says so."""
        return self.vmax < 1.0

    @property
    def bar_label(self) -> str:
        """What the colour bar says it shows."""
        shown = "attention weight"
        if self.weighted:
            shown = "weight × ‖W_O v‖"
        if self.clips:
            return f"{shown} (≥ {self.top:.3g} drawn as {self.top:.3g})"
        return shown


def cell_text(weight: float) -> str:
    """A number printed in a cell (--values): ``.42``, ``1.0``; a value-weighted map's
    ``2.4`` or ``13``."""
    if weight <= 1:
        return f"{weight:.2f}".lstrip("0") if weight < 1 else "1.0"
    return f"{weight:.1f}" if weight < 9.95 else f"{weight:.0f}"


@dataclass(frozen=True)
class Frame:
    """What all maps of one input share: the header line and the token labels."""

    header: str
    query_labels: tuple[str, ...]
    key_labels: tuple[str, ...]


def check_colormap(name: str) -> None:
    import matplotlib

    if name not in matplotlib.colormaps:
        raise UsageError(
            f"unknown colormap {name!r}: try viridis, magma, Blues, Greys (any matplotlib name)"
        )


def token_label(token: str) -> str:
    """A token as a picture labels it: made visible (its spaces ``␣``), cut past MAX_LABEL
    characters."""
    shown = spaces_shown(token)
    return shown if len(shown) <= MAX_LABEL else shown[: MAX_LABEL - 1] + "…"


def short_title(title: str) -> str:
    """``layer 2 · head 0`` -> ``L2 H0``: the title of a panel too narrow for the long one."""
    title = re.sub(r"\blayers? (?=-?\d)", "L", title)
    return re.sub(r"\bheads? (?=-?\d)", "H", title).replace(" · ", " ")


def axes_note(key_step: int, query_step: int) -> str:
    """What the rows and columns are, and which labels are shown."""
    note = "rows: query tokens\ncolumns: key tokens"
    if key_step == query_step > 1:
        note += f"\nlabels: one token in {key_step}"
    elif max(key_step, query_step) > 1:
        steps = [(query_step, "query"), (key_step, "key")]
        note += "\nlabels: " + ", ".join(
            f"one {side} token in {step}" for step, side in steps if step > 1
        )
    return note
