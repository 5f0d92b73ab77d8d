"""A trace: how much of the answer comes back when the clean run's activation is put
into the run on the corrupted text, at each layer × position of one site."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.analysis.heads import Answer
from attnviz.choices import Site


@dataclass(frozen=True)
class Trace:
    """``effect`` is (layers, positions): the metric with the clean activation restored at
    that layer and position of ``site``, less the corrupted run's metric."""

    model: str
    on: Answer  # its clean_metric and corrupt_metric are both runs'
    site: Site
    tokens: list[str]  # the clean text's, as the tokenizer splits it
    corrupt_tokens: list[str]
    layers: list[int]
    effect: np.ndarray  # (L, T)

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
