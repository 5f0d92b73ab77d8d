"""AttentionMaps: the data every command produces and every renderer reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnviz.errors import AttnvizError

SCHEMA_VERSION = 1


class SchemaError(AttnvizError):
    """A saved document that is not a valid AttentionMaps document."""


@dataclass(eq=False)
class AttentionMaps:
    """Attention weights of selected layers and heads for one input.

    ``weights[i, j]`` is the map of layer ``layers[i]``, head ``heads[j]``: rows
    are query tokens, columns key tokens, each row a probability distribution.
    """

    query_tokens: list[str]
    key_tokens: list[str]
    weights: np.ndarray  # (len(layers), len(heads), len(query_tokens), len(key_tokens)), float32
    layers: list[int]
    heads: list[int]
    mode: str
    model: str
    text: str = ""
    target: str | None = None

    def __post_init__(self) -> None:
        self.weights = np.asarray(self.weights, dtype=np.float32)
        expected = (len(self.layers), len(self.heads), len(self.query_tokens), len(self.key_tokens))
        if self.weights.shape != expected:
            raise SchemaError(
                f"weights have shape {self.weights.shape}, expected {expected} "
                "(layers, heads, query tokens, key tokens)"
            )

    def head(self, layer: int, head: int) -> np.ndarray:
        """The (query tokens, key tokens) map of one layer and head, by their model indices."""
        return self.weights[self.layers.index(layer), self.heads.index(head)]

    def select(
        self, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None
    ) -> AttentionMaps:
        """A view restricted to some of the layers and heads held (by model index)."""
        layers = list(self.layers if layers is None else layers)
        heads = list(self.heads if heads is None else heads)
        layer_rows = [self.layers.index(layer) for layer in layers]
        head_rows = [self.heads.index(head) for head in heads]
        return AttentionMaps(
            query_tokens=self.query_tokens,
            key_tokens=self.key_tokens,
            weights=self.weights[np.ix_(layer_rows, head_rows)],
            layers=layers,
            heads=heads,
            mode=self.mode,
            model=self.model,
            text=self.text,
            target=self.target,
        )

    def to_dict(self) -> dict[str, Any]:
        """The schema-version-1 document: plain Python types, ready for ``json.dumps``."""
        from attnviz import __version__

        return {
            "schema_version": SCHEMA_VERSION,
            "attnviz_version": __version__,
            "model": self.model,
            "mode": self.mode,
            "text": self.text,
            "target": self.target,
            "query_tokens": list(self.query_tokens),
            "key_tokens": list(self.key_tokens),
            "layers": list(self.layers),
            "heads": list(self.heads),
            "weights": self.weights.tolist(),
        }

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> AttentionMaps:
        """Read a document written by :meth:`to_dict`, checking its version and shape."""
        if not isinstance(document, dict):
            raise SchemaError("an AttentionMaps document must be a JSON object")
        version = document.get("schema_version")
        if version != SCHEMA_VERSION:
            raise SchemaError(
                f"schema_version {version!r} is not supported (this attnviz reads {SCHEMA_VERSION})"
            )
        required = ("model", "mode", "query_tokens", "key_tokens", "layers", "heads", "weights")
        missing = [name for name in required if name not in document]
        if missing:
            raise SchemaError(f"document is missing {', '.join(missing)}")
        try:
            weights = np.asarray(document["weights"], dtype=np.float32)
        except (TypeError, ValueError) as error:
            raise SchemaError(f"weights are not a rectangular array of numbers ({error})") from None
        return cls(
            query_tokens=[str(token) for token in document["query_tokens"]],
            key_tokens=[str(token) for token in document["key_tokens"]],
            weights=weights,
            layers=[int(layer) for layer in document["layers"]],
            heads=[int(head) for head in document["heads"]],
            mode=str(document["mode"]),
            model=str(document["model"]),
            text=str(document.get("text", "")),
            target=document.get("target"),
        )
