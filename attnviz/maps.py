"""AttentionMaps: the data every command produces and every renderer reads."""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from attnviz.errors import AttnvizError

SCHEMA_VERSION = 1

# An aggregate names how the maps were combined, and whether it folds the
# layer axis (True) as well as the head axis.
AGGREGATES = {
    "mean over heads": False,
    "max over heads": False,
    "mean over layers and heads": True,
    "max over layers and heads": True,
    "rollout": True,
    "flow": True,
}


class SchemaError(AttnvizError):
    """A saved document that is not a valid AttentionMaps document."""


def index_span(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 3]`` -> ``0–3``; ``[0, 2]`` -> ``0,2``."""
    if len(indices) > 2 and list(indices) == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}–{indices[-1]}"
    return ",".join(map(str, indices))


class MapPanel(NamedTuple):
    layer: int | None  # None: combined over layers
    head: int | None  # None: combined over heads
    title: str
    matrix: np.ndarray  # (query tokens, key tokens)


@dataclass(eq=False)
class AttentionMaps:
    """Attention weights of selected layers and heads for one input.

    ``weights[i, j]`` is the map of layer ``layers[i]``, head ``heads[j]``: rows
    are query tokens, columns key tokens, each row a probability distribution.
    When ``aggregate`` is set, the maps of ``heads`` (and of ``layers``, for the
    aggregates that fold layers too) were combined into one, and that axis has
    length 1.
    """

    query_tokens: list[str]
    key_tokens: list[str]
    weights: np.ndarray  # (layers, heads, len(query_tokens), len(key_tokens)), float32 or float16
    layers: list[int]
    heads: list[int]
    mode: str
    model: str
    text: str = ""
    target: str | None = None
    aggregate: str | None = None

    def __post_init__(self) -> None:
        weights = np.asarray(self.weights)
        keep = weights.dtype in (np.float32, np.float16)  # float16: maps stored at half size
        self.weights = weights if keep else weights.astype(np.float32)
        if self.aggregate is not None and self.aggregate not in AGGREGATES:
            raise SchemaError(f"unknown aggregate {self.aggregate!r}")
        expected = (*self.map_grid, len(self.query_tokens), len(self.key_tokens))
        if self.weights.shape != expected:
            raise SchemaError(
                f"weights have shape {self.weights.shape}, expected {expected} "
                "(layers, heads, query tokens, key tokens)"
            )

    @property
    def map_grid(self) -> tuple[int, int]:
        """How many maps there are along the layer and the head axis."""
        if self.aggregate is None:
            return len(self.layers), len(self.heads)
        return (1 if AGGREGATES[self.aggregate] else len(self.layers)), 1

    def head(self, layer: int, head: int) -> np.ndarray:
        """The (query tokens, key tokens) map of one layer and head, by their model indices."""
        if self.aggregate is not None:
            raise ValueError("aggregated maps have no single heads")
        return self.weights[self.layers.index(layer), self.heads.index(head)]

    def panels(self) -> Iterator[MapPanel]:
        """Every map with its title, in layer-major order."""
        heads = index_span(self.heads)
        for i in range(self.weights.shape[0]):
            for j in range(self.weights.shape[1]):
                matrix = self.weights[i, j]
                if self.aggregate is None:
                    layer, head = self.layers[i], self.heads[j]
                    yield MapPanel(layer, head, f"layer {layer} · head {head}", matrix)
                elif not AGGREGATES[self.aggregate]:
                    method = self.aggregate.split()[0]
                    title = f"layer {self.layers[i]} · {method} of heads {heads}"
                    yield MapPanel(self.layers[i], None, title, matrix)
                else:
                    title = f"{self.aggregate} · layers {index_span(self.layers)} · heads {heads}"
                    yield MapPanel(None, None, title, matrix)

    def select(
        self, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None
    ) -> AttentionMaps:
        """A view restricted to some of the layers and heads held (by model index)."""
        if self.aggregate is not None:
            raise ValueError("aggregated maps cannot be narrowed to layers and heads")
        layers = list(self.layers if layers is None else layers)
        heads = list(self.heads if heads is None else heads)
        layer_rows = [self.layers.index(layer) for layer in layers]
        head_rows = [self.heads.index(head) for head in heads]
        weights = self.weights[np.ix_(layer_rows, head_rows)]
        return self.replace(weights=weights, layers=layers, heads=heads)

    def astype(self, dtype: str) -> AttentionMaps:
        """The same maps with weights stored as ``float16`` or ``float32``."""
        if dtype not in ("float16", "float32"):
            raise ValueError(f"weights are stored as float16 or float32, not {dtype}")
        return self.replace(weights=self.weights.astype(dtype))

    def replace(self, **changes: Any) -> AttentionMaps:
        fields = {**self.__dict__, **changes}
        return AttentionMaps(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The schema-version-1 document: plain Python types, ready for ``json.dumps``."""
        from attnviz import __version__

        document = {
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
        if self.aggregate is not None:
            document["aggregate"] = self.aggregate
        return document

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
            weights = np.asarray(document["weights"])
            if weights.dtype not in (np.float16, np.float32):
                weights = weights.astype(np.float32)
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
                aggregate=document.get("aggregate"),
            )
        except (TypeError, ValueError) as error:
            raise SchemaError(f"malformed document: {error}") from None

    def _repr_html_(self) -> str:
        """A notebook picture: an HTML table per map, coloured inline, nothing fetched."""
        from attnviz.render.palette import ink, rgb

        scale = float(self.weights.max()) or 1.0
        parts = [f"<div><b>{html.escape(self.model)}</b> · {html.escape(self.mode)} attention"]
        for _, _, title, matrix in self.panels():
            rows = ["<tr><th></th>"]
            rows += [f"<th>{html.escape(token)}</th>" for token in self.key_tokens]
            rows.append("</tr>")
            for token, row in zip(self.query_tokens, matrix, strict=True):
                rows.append(f"<tr><th>{html.escape(token)}</th>")
                for weight in row:
                    relative = float(weight) / scale
                    rows.append(
                        f'<td style="background:rgb{rgb(relative)};color:{ink(relative)};'
                        f'padding:2px 4px" title="{weight:.4f}">{weight:.2f}</td>'
                    )
                rows.append("</tr>")
            parts.append(
                f"<table style='display:inline-block;margin:4px;font-size:80%'>"
                f"<caption>{html.escape(title)}</caption>{''.join(rows)}</table>"
            )
        parts.append("</div>")
        return "".join(parts)
