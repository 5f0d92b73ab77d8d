"""A trace: how much of the answer comes back when the clean run's activation is put
into the run on the corrupted text, at each layer × position of one site (at a head's
site, each layer × head, at every position or one position at a time)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.effects import Answer, Drawn
from attnviz.choices import Output, Site
from attnviz.drawing import drawer

if TYPE_CHECKING:
    from attnviz.drawing import Picture


@dataclass(frozen=True)
class Trace(Drawn):
    """``effect``: the metric with the clean activation restored at one cell of ``site``,
    less the corrupted run's metric; its axes are :attr:`axes`: (layers, positions) at a
    layer's site, (layers, heads) at a head's, (layers, heads, positions) ``by_position``."""

    model: str
    on: Answer  # its clean_metric and corrupt_metric are both runs'
    site: Site
    tokens: list[str]  # the clean text's, as the tokenizer splits it
    corrupt_tokens: list[str]
    layers: list[int]
    effect: np.ndarray  # (L, T), (L, H) or (L, H, T)
    by_position: bool = False

    @property
    def axes(self) -> tuple[str, ...]:
        """What each axis of ``effect`` counts."""
        if not self.site.of_heads:
            return ("layer", "position")
        return ("layer", "head", "position") if self.by_position else ("layer", "head")

    def grid(self) -> tuple[list[str], list[str] | None, np.ndarray]:
        """The effect as a table for a picture: each row's label, each column's (None where
        the columns are the positions) and the (rows, columns) values. A head's cells by
        position are a row per layer and head."""
        layer_rows = [f"layer {layer}" for layer in self.layers]
        if self.axes == ("layer", "position"):
            return layer_rows, None, self.effect
        heads = self.effect.shape[1]
        if self.axes == ("layer", "head"):
            return layer_rows, [f"head {head}" for head in range(heads)], self.effect
        rows = [f"L{layer} H{head}" for layer in self.layers for head in range(heads)]
        return rows, None, self.effect.reshape(-1, self.effect.shape[-1])

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        on = self.on
        sizes = zip(self.axes, self.effect.shape, strict=True)
        return (
            f"<Trace at {self.site.value} of {self.model}: answer {on.answer_token!r}, clean "
            f"{on.clean_metric:z.3f}, corrupted {on.corrupt_metric:z.3f}; "
            + " × ".join(f"{size} {axis}s" for axis, size in sizes)
            + ">"
        )

    def picture(self, format: Output | str = "png", **style: Any) -> Picture:
        """The layers × tokens picture ``trace --picture`` draws, the tokens the corrupted
        text changed marked with an asterisk. ``style``: ``dpi``, ``figsize``,
        ``font_size``, ``title``, as export's options. A notebook shows it."""
        return drawer().trace_figure(self, format, style)

    def normalized(self) -> Trace:
        """Each cell's effect as the fraction of the corruption's change it brings back,
        (restored − corrupted) / (clean − corrupted): 1 where restoring that one
        activation gives the clean run's metric back."""
        return replace(
            self, on=replace(self.on, normalized=True), effect=self.effect / self.on.corruption()
        )

    def records(self) -> list[dict[str, object]]:
        """A row per cell, for a table of data (csv): its layer, head and position (those
        of its axes) and the effect."""
        records = []
        for index, value in np.ndenumerate(self.effect):
            cell = dict(zip(self.axes, index, strict=True))
            record: dict[str, object] = {"layer": self.layers[cell["layer"]]}
            if "head" in cell:
                record["head"] = cell["head"]
            if "position" in cell:
                position = cell["position"]
                record.update(
                    position=position,
                    token=self.tokens[position],
                    corrupt_token=self.corrupt_tokens[position],
                )
            records.append({**record, "effect": float(value)})
        return records

    def fields(self) -> dict[str, object]:
        """What a file of this trace records beside its rows."""
        by_position = {"by_position": True} if self.by_position else {}
        return {"model": self.model, "site": self.site.value, **by_position, **self.on.fields()}

    def document(self) -> dict[str, object]:
        """The whole trace as one JSON document: ``effect`` along ``axes``."""
        return {
            **self.fields(),
            "axes": list(self.axes),
            "tokens": self.tokens,
            "corrupt_tokens": self.corrupt_tokens,
            "layers": self.layers,
            "effect": self.effect.tolist(),
        }
