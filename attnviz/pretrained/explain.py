"""One query row of a pretrained model's head, from its dot products to its weights.

The queries and keys are taken from inside the model: for one forward pass,
attnviz registers an attention function (and its mask) with transformers that
records what the chosen module passes to attention (after rotary embeddings
and the like) and runs the model's own eager attention. The model's own row
comes from a separate, ordinary eager run, so a disagreement would show.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Mode
from attnviz.errors import AttnvizError, AttnvizWarning, UsageError
from attnviz.pretrained.encoding import model_inputs
from attnviz.pretrained.fused import recording
from attnviz.pretrained.labels import piece_labels
from attnviz.schema import fields_document
from attnviz.selection import resolve_one

if TYPE_CHECKING:
    from torch import nn

    from attnviz.pretrained.encoding import ModelInputs
    from attnviz.pretrained.loading import PretrainedModel
    from attnviz.pretrained.reader import ModelReader


@dataclass
class QueryExplanation:
    """One query row of a pretrained model's head, from its dot products to its weights."""

    model: str
    mode: Mode
    layer: int
    head: int
    query_index: int
    query_token: str
    key_tokens: list[str]
    scale: float  # what the model multiplies the dot products by (1/√d_k for most)
    dots: np.ndarray  # q · k for every key
    scaled: np.ndarray  # dots · scale
    mask: np.ndarray  # what the model adds before the softmax: 0, −∞ (hidden), or a bias
    weights: np.ndarray  # softmax(scaled + mask), computed here
    model_weights: np.ndarray  # the model's own attention row, for comparison

    @property
    def largest_difference(self) -> float:
        return float(np.abs(self.weights - self.model_weights).max())

    def to_dict(self) -> dict[str, Any]:
        """The row's numbers by name; -∞ (hidden by the mask) is written as null."""
        return fields_document(self, largest_difference=self.largest_difference)


def explain_query(
    extractor: ModelReader,
    text: str,
    *,
    mode: Mode,
    target: str | None,
    layer: int | str,
    head: int | str,
    query: int,
    raw_pieces: bool = False,
) -> QueryExplanation:
    """The dot products of one query with every key, scaled, masked and softmaxed, next
    to the model's own attention row."""
    import torch

    loaded = extractor.loaded
    modules = extractor.modules(mode)
    layer_index = resolve_one(layer, len(modules), "layer")
    inputs = model_inputs(loaded, [(text, target, None)], mode)
    seen = _recorded(loaded, modules[layer_index][0], inputs)
    query_states, key_states = seen["query"][0], seen["key"][0]  # (H, T, Dh), (H_kv, S, Dh)
    with warnings.catch_warnings():  # a cut text was said once, by model_inputs above
        warnings.simplefilter("ignore", AttnvizWarning)
        own = extractor.extract(text, mode=mode, target=target, layers=[layer_index])
    num_heads = query_states.shape[0]
    head_index = resolve_one(head, num_heads, "head")
    query_labels = piece_labels(loaded, inputs.queries[0], raw_pieces).text
    key_labels = piece_labels(loaded, inputs.keys[0], raw_pieces).text
    if not -len(query_labels) <= query < len(query_labels):
        raise UsageError(
            f"--query {query} is out of range: there are {len(query_labels)} query tokens "
            f"(0 to {len(query_labels) - 1})"
        )
    query = query % len(query_labels)
    kv_head = head_index // (num_heads // key_states.shape[0])  # grouped-query attention
    scale = seen["scaling"] if seen["scaling"] is not None else query_states.shape[-1] ** -0.5
    q = query_states[head_index, query].double()  # (Dh,)
    k = key_states[kv_head, : len(key_labels)].double()  # (S, Dh)
    dots = k @ q  # (S,)
    scaled = dots * scale
    mask = _mask_row(seen["mask"], head_index, query, scaled)
    weights = torch.softmax(scaled + mask, dim=-1)
    return QueryExplanation(
        model=loaded.name,
        mode=mode,
        layer=layer_index,
        head=head_index,
        query_index=query,
        query_token=query_labels[query],
        key_tokens=key_labels,
        scale=float(scale),
        dots=dots.numpy(),
        scaled=scaled.numpy(),
        mask=mask.numpy(),
        weights=weights.numpy(),
        model_weights=own.weights[0, head_index, query].astype(np.float64),
    )


def _mask_row(added: Any, head: int, query: int, scaled: Any) -> Any:
    """The row of the additive mask the model added to ``head``'s scores at ``query``
    (a T5 position bias folded in), as long as ``scaled`` (S,), float64: 0 where there is
    none, -inf where the model's mask shuts a key out."""
    import torch  # as explain_query, which has loaded it

    if added is None:
        return torch.zeros_like(scaled)
    row = added[0, head if added.shape[1] > 1 else 0, query][: scaled.shape[0]].double()
    return torch.where(row <= torch.finfo(added.dtype).min / 2, -math.inf, row)


def _recorded(loaded: PretrainedModel, layer: nn.Module, inputs: ModelInputs) -> dict[str, Any]:
    """What the attention function of ``layer`` (a module of ``loaded``'s model) was
    called with on ``inputs``: its queries and keys, its additive mask (with a T5 position
    bias folded in) and its scaling."""
    import torch

    inside = {id(module) for module in layer.modules()}
    seen: dict[str, Any] = {}

    def record(module, query_states, key_states, value, attention_mask, args, kwargs) -> None:
        if id(module) in inside and "query" not in seen:
            additive = [
                part for part in (attention_mask, kwargs.get("position_bias")) if part is not None
            ]
            seen.update(
                query=query_states,
                key=key_states,
                mask=sum(additive) if additive else None,
                scaling=kwargs.get("scaling", args[0] if args else None),
            )

    try:
        with recording(loaded.model, record, fused=False), torch.inference_mode():
            loaded.model(**inputs.arguments)
    except Exception as error:  # an architecture whose attention cannot be recorded this way
        raise AttnvizError(f"cannot follow the attention of {loaded.name}: {error}") from None
    if "query" not in seen:
        raise AttnvizError(
            f"{type(layer).__name__} of {loaded.name} computes its attention without "
            "transformers' attention functions: explain cannot follow it"
        )
    return seen
