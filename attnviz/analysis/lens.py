"""The logit lens: what each layer's residual stream would predict if the model ended
there (nostalgebraist 2020): read through the final norm, at its own scale, and the
unembedding, at every position."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.analysis.effects import Drawn
from attnviz.choices import Output
from attnviz.drawing import drawer

if TYPE_CHECKING:
    from attnviz.drawing import Picture


@dataclass(frozen=True)
class Lens(Drawn):
    """Per layer and position (L, T): ``top`` the likeliest next token read from the
    residual stream leaving that layer (``top_ids`` its id), ``probability`` its
    probability, and with an answer ``answer`` the answer token's log-probability. The
    last layer's is the model's own next-token distribution."""

    model: str
    tokens: list[str]  # the text's, as the tokenizer splits it
    layers: list[int]
    top: list[list[str]]  # (L, T), each the tokenizer's decoding of its token
    top_ids: np.ndarray  # (L, T)
    probability: np.ndarray  # (L, T)
    answer_token: str | None = None
    answer: np.ndarray | None = None  # (L, T): the answer token's log-probability

    def __repr__(self) -> str:
        """A short header (a notebook shows the picture beside it), not the arrays."""
        said = "" if self.answer_token is None else f", answer {self.answer_token!r}"
        return (
            f"<Lens of {self.model}: {len(self.layers)} layers × {len(self.tokens)} "
            f"positions{said}>"
        )

    def picture(self, format: Output | str = "png", **style: Any) -> Picture:
        """The layers × positions picture ``lens --picture`` draws: each cell's top token,
        coloured by its probability. ``style``: as export's options."""
        return drawer().lens_figure(self, format, style)

    def records(self) -> list[dict[str, object]]:
        """A row per layer × position, for a table of data (csv)."""
        rows = []
        for row, layer in enumerate(self.layers):
            for position, token in enumerate(self.tokens):
                record: dict[str, object] = {
                    "layer": layer,
                    "position": position,
                    "token": token,
                    "top": self.top[row][position],
                    "top_id": int(self.top_ids[row, position]),
                    "probability": float(self.probability[row, position]),
                }
                if self.answer is not None:
                    record["answer"] = float(self.answer[row, position])
                rows.append(record)
        return rows

    def fields(self) -> dict[str, object]:
        """What a file of this lens records beside its rows."""
        answer = {} if self.answer_token is None else {"answer_token": self.answer_token}
        return {"model": self.model, **answer}

    def document(self) -> dict[str, object]:
        """The whole lens as one JSON document: each array layers × positions."""
        answer = {} if self.answer is None else {"answer": self.answer.tolist()}
        return {
            **self.fields(),
            "tokens": self.tokens,
            "layers": self.layers,
            "top": self.top,
            "top_ids": self.top_ids.tolist(),
            "probability": self.probability.tolist(),
            **answer,
        }
