"""A trace: how much of the answer comes back when the clean run's activation is put
into the run on the corrupted text, at each layer × position of one site."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.heads import Answer, Drawn
from attnviz.choices import Output, Site

if TYPE_CHECKING:
    from attnviz.render.image import Picture


@dataclass(frozen=True)
class Trace(Drawn):
    """``effect`` is (layers, positions): the metric with the clean activation restored at
    that layer and position of ``site``, less the corrupted run's metric."""

    model: str
    on: Answer  # its clean_metric and corrupt_metric are both runs'
    site: Site
    tokens: list[str]  # the clean text's, as the tokenizer splits it
    corrupt_tokens: list[str]
    layers: list[int]
    effect: np.ndarray  # (L, T)

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        on = self.on
        return (
            f"<Trace at {self.site.value} of {self.model}: answer {on.answer_token!r}, clean "
            f"{on.clean_metric:.3f}, corrupted {on.corrupt_metric:.3f}; {len(self.layers)} "
            f"layers × {len(self.tokens)} positions>"
        )

    def picture(self, format: Output | str = "png", **style: Any) -> Picture:
        """The layers × tokens picture ``trace --picture`` draws, the tokens the corrupted
        text changed marked with an asterisk. ``style``: ``dpi``, ``figsize``,
        ``font_size``, ``title``, as export's options. A notebook shows it."""
        # the drawing sits above the data it draws (it imports them)
        from attnviz.render.effects import trace_figure

        return trace_figure(self, format, style)

    def normalized(self) -> Trace:
        """Each cell's effect as the fraction of the corruption's change it brings back,
        (restored − corrupted) / (clean − corrupted): 1 where restoring that one
        activation gives the clean run's metric back."""
        return replace(
            self, on=replace(self.on, normalized=True), effect=self.effect / self.on.corruption()
        )

    def records(self) -> list[dict[str, object]]:
        """A row per layer × position, for a table of data (csv)."""
        return [
            {
                "layer": layer,
                "position": position,
                "token": self.tokens[position],
                "corrupt_token": self.corrupt_tokens[position],
                "effect": float(self.effect[row, position]),
            }
            for row, layer in enumerate(self.layers)
            for position in range(len(self.tokens))
        ]

    def fields(self) -> dict[str, object]:
        """What a file of this trace records beside its rows."""
        return {"model": self.model, "site": self.site.value, **self.on.fields()}

    def document(self) -> dict[str, object]:
        """The whole trace as one JSON document: ``effect`` as layers × positions."""
        return {
            **self.fields(),
            "tokens": self.tokens,
            "corrupt_tokens": self.corrupt_tokens,
            "layers": self.layers,
            "effect": self.effect.tolist(),
        }
