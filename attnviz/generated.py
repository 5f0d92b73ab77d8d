"""What a model wrote after a prompt (``Extractor.generate``), with the attention of the
whole sequence: data, as maps are, below every extractor that makes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


@dataclass
class Generation:
    """What a model wrote after a prompt, and the attention of the whole sequence."""

    prompt: str  # as far as the model read it (a prompt too long for it is cut)
    text: str  # the generated continuation, decoded without special tokens
    maps: AttentionMaps  # prompt_length marks where the generated rows begin
    finished: str  # "end of sequence" or "length"
