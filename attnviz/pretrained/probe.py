"""The head detectors' probe for a pretrained model: random tokens of its vocabulary,
repeated once, after its first token (as TransformerLens's induction probe: BOS, then
random tokens twice).

The probe is a text, so that it runs as any input does (labels, --rows, fused blocks)
and can be shown and read again; it is made of whole words, each one token of the
vocabulary wherever it stands, and the text is checked to give exactly those tokens.
"""

from __future__ import annotations

import numpy as np

from attnviz.errors import AttnvizError
from attnviz.pretrained.loading import PretrainedModel

_LEADS = (" ", "")  # a word spelled with its space (byte-level BPE, WordPiece), or without


def probe_text(loaded: PretrainedModel, length: int, seed: int) -> str:
    """``length`` distinct random word tokens, twice, after the model's first token
    (the tokenizer's own, or its BOS token written in front)."""
    tokenizer = loaded.tokenizer
    special = set(tokenizer.all_special_ids)
    order = np.random.default_rng(seed).permutation(len(tokenizer))
    for lead in _LEADS:
        words = _words(tokenizer, order, special, lead, length)
        if words is None:
            continue
        text = lead + " ".join([*words.values(), *words.values()])
        encoded = tokenizer(text)["input_ids"]
        if encoded and encoded[0] not in special and tokenizer.bos_token is not None:
            text = tokenizer.bos_token + text
            encoded = tokenizer(text)["input_ids"]
        inner = [token for token in encoded if token not in special]
        if inner == [*words, *words] and encoded[0] in special:
            return text
    raise AttnvizError(
        f"cannot make a probe of repeated tokens for the tokenizer of {loaded.name}: too few "
        "of its tokens are whole words that it reads back as one token"
    )


def _words(tokenizer, order, special: set[int], lead: str, length: int) -> dict[int, str] | None:
    """Token id -> word, for the first ``length`` tokens in ``order`` that are whole words
    read back as that one token where they stand in the probe; None when too few are
    found among the first tokens tried."""
    words: dict[int, str] = {}
    for token in order[: 50 * length].tolist():
        if token in special:
            continue
        word = tokenizer.decode([token]).strip()
        if not (word.isascii() and word.isalpha() and 3 <= len(word) <= 12):
            continue
        if tokenizer(f"{lead}{word} {word}", add_special_tokens=False)["input_ids"] == [token] * 2:
            words[token] = word
            if len(words) == length:
                return words
    return None
