"""The maps as pictures name them: each map with its title, the query tokens' labels
(generated ones marked), and what else a picture must say; for every renderer and the
csv rows, from :class:`~attnviz.maps.AttentionMaps`'s data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from attnviz.choices import Weighting
from attnviz.safe_text import display_label
from attnviz.selection import index_span

if TYPE_CHECKING:
    import numpy as np

    from attnviz.maps import AttentionMaps

GENERATED = "▸"  # marks the labels of generated tokens in pictures


class MapPanel(NamedTuple):
    layer: int | None  # None: combined over layers
    head: int | None  # None: combined over heads
    title: str
    matrix: np.ndarray  # (query tokens, key tokens)


def panels_of(maps: AttentionMaps) -> Iterator[MapPanel]:
    """Every map with its title, in layer-major order."""
    heads = index_span(maps.heads)
    for i in range(maps.weights.shape[0]):
        for j in range(maps.weights.shape[1]):
            matrix = maps.weights[i, j]
            if maps.aggregate is None:
                layer, head = maps.layers[i], maps.heads[j]
                title = f"{_layer_title(maps, layer)} · head {head}"
                yield MapPanel(layer, head, title, matrix)
            elif not maps.aggregate.folds_layers:
                title = f"{_layer_title(maps, maps.layers[i])} · {maps.aggregate} of heads {heads}"
                yield MapPanel(maps.layers[i], None, title, matrix)
            else:
                title = (
                    f"{maps.aggregate.description} · layers {index_span(maps.layers)} · "
                    f"heads {heads}"
                )
                yield MapPanel(None, None, title, matrix)


def _layer_title(maps: AttentionMaps, layer: int) -> str:
    """How a picture names a layer: with its kind (global, or sliding N) where the
    model's layers differ."""
    if maps.layer_kinds is None:
        return f"layer {layer}"
    return f"layer {layer} ({maps.layer_kinds[maps.layers.index(layer)]})"


def query_labels_of(maps: AttentionMaps) -> list[str]:
    """The query tokens as pictures label them: generated tokens marked with ``▸``."""
    if maps.prompt_length is None:
        return list(maps.query_tokens)
    # Each row's first token position: its own, a chosen row's, or its bin's first.
    starts = maps.query_positions or [
        row * (maps.pooled or 1) for row in range(len(maps.query_tokens))
    ]
    return [
        f"{GENERATED}{token}" if start >= maps.prompt_length else token
        for start, token in zip(starts, maps.query_tokens, strict=True)
    ]


def notes_of(maps: AttentionMaps) -> str:
    """What else a picture of these maps must say: where a pair's sentence B begins,
    which sentences are kept, how many tokens were generated."""
    notes = []
    if maps.weighting is Weighting.VALUE:
        notes.append("value-weighted (weight × ‖W_O v‖)")
    if maps.pair_start is not None:
        notes.append(f"sentence B from token {maps.pair_start}")
    if maps.between is not None:
        rows, columns = maps.between.upper().split("-")
        notes.append(f"rows: sentence {rows}, columns: sentence {columns}, each row renormalised")
    if maps.prompt_length is not None and maps.query_positions is None and not maps.pooled:
        generated = len(maps.query_tokens) - maps.prompt_length
        notes.append(f"{generated} generated (▸) after a {maps.prompt_length}-token prompt")
    elif maps.prompt_length is not None:
        notes.append(f"generated (▸) after a {maps.prompt_length}-token prompt")
    if maps.query_positions is not None:
        tokens = f"token{'s' * (len(maps.query_positions) > 1)}"
        notes.append(f"rows: query {tokens} {index_span(maps.query_positions)}")
    if maps.pooled is not None:
        notes.append(f"{maps.pooled} tokens per bin (rows averaged, columns summed)")
    if maps.span is not None:
        notes.append(f"span: key token{'s' * (len(maps.span) > 1)} {index_span(maps.span)}")
    if maps.recorded.chat:
        notes.append("read as a chat" + (" with a system prompt" if maps.recorded.system else ""))
    notes += [display_label(note) for note in maps.recorded.notes()]  # a user's words
    return "".join(f" · {note}" for note in notes)
