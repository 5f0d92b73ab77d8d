"""Token labels a person reads: cleaned pieces, which tokens are special, pieces
merged into words, special tokens dropped with rows renormalised.

Shape letters: T query tokens, S key tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.analysis.grid import group, keep
from attnviz.builtin.tokenizer import decoded_piece
from attnviz.errors import UsageError
from attnviz.pretrained.encoding import Side
from attnviz.pretrained.loading import PretrainedModel
from attnviz.request import Request


@dataclass
class Labels:
    """What a person reads for each position: a label, and whether it is a special token."""

    text: list[str]
    special: list[bool]
    segment: list[int]  # 0: the text (sentence A); 1: sentence B of a pair

    def pair_start(self) -> int | None:
        """Where sentence B begins, if there is one."""
        return self.segment.index(1) if 1 in self.segment else None


def piece_labels(loaded: PretrainedModel, side: Side, raw: bool = False) -> Labels:
    """The tokenizer's pieces as it decodes them (``##ing`` -> ``ing``, ``Ġthe`` -> `` the``:
    a leading space kept, which views show as ``␣``), or as the tokenizer spells them when
    ``raw``."""
    tokenizer = loaded.tokenizer
    ids = side.encoding["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    # An unknown-word token ([UNK]) stands for a real word the tokenizer could not
    # spell: it is not special, so --no-special keeps it.
    special_ids = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    byte_level = loaded.byte_level
    segments = side.segments()
    labels = Labels([], [], segments)
    offsets = side.encoding["offset_mapping"]
    template = side.template or [False] * len(ids)  # a chat template's own tokens are special
    for token_id, piece, (start, end), added in zip(ids, pieces, offsets, template, strict=True):
        # A template's words (its system prompt, role names) are special, but words: read
        # cleaned as the text's are; a special token (<|im_start|>) keeps its spelling.
        special_token = token_id in special_ids
        is_special = special_token or added
        label = piece if special_token or raw else decoded_piece(piece, byte_level=byte_level)
        if "\ufffd" in label:  # one byte of a longer character: show the character
            source = side.pair if segments[len(labels.text)] and side.pair else side.text
            spaced = " " if label.startswith(" ") else ""
            label = spaced + (source[start:end].strip() or label.strip())
        labels.text.append(label)
        labels.special.append(is_special)
    return labels


def word_groups(side: Side, special: list[bool]) -> list[list[int]]:
    """Positions grouped into words; every special token is a group of its own."""
    groups: list[list[int]] = []
    previous = None
    for position, word in enumerate(side.encoding.word_ids()):
        if word is None or special[position] or word != previous:
            groups.append([position])
        else:
            groups[-1].append(position)
        previous = None if word is None or special[position] else word
    return groups


def _merged(labels: Labels, groups: list[list[int]]) -> Labels:
    return Labels(
        ["".join(labels.text[position] for position in group) for group in groups],
        [labels.special[group[0]] for group in groups],
        [labels.segment[group[0]] for group in groups],
    )


def readable(
    loaded: PretrainedModel, weights: np.ndarray, query: Side, key: Side, request: Request
) -> tuple[np.ndarray, Labels, Labels]:
    """Weights (…, T, S) with their labels, pieces merged into words and special tokens
    dropped when asked."""
    raw = request.raw_pieces
    query_labels, key_labels = (
        piece_labels(loaded, query, raw),
        piece_labels(loaded, key, raw),
    )
    if request.words:
        query_groups = word_groups(query, query_labels.special)
        key_groups = word_groups(key, key_labels.special)
        weights = group(weights, query_groups, key_groups)
        query_labels, key_labels = (
            _merged(query_labels, query_groups),
            _merged(key_labels, key_groups),
        )
    if not request.special:
        keep_queries = [i for i, flag in enumerate(query_labels.special) if not flag]
        keep_keys = [i for i, flag in enumerate(key_labels.special) if not flag]
        if not keep_queries or not keep_keys:
            raise UsageError("--no-special leaves no tokens: the text has only special tokens")
        weights = keep(weights, keep_queries, keep_keys)
        query_labels = Labels(
            [query_labels.text[i] for i in keep_queries],
            [False] * len(keep_queries),
            [query_labels.segment[i] for i in keep_queries],
        )
        key_labels = Labels(
            [key_labels.text[i] for i in keep_keys],
            [False] * len(keep_keys),
            [key_labels.segment[i] for i in keep_keys],
        )
    return weights, query_labels, key_labels
