"""What a model writes after a prompt (``Extractor.generate``): how its tokens are chosen
(:class:`Sampling`), and what it wrote, with the attention of the whole sequence
(:class:`Generation`): data, as maps are, below every extractor that makes it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.errors import UsageError

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


@dataclass
class Generation:
    """What a model wrote after a prompt, and the attention of the whole sequence."""

    prompt: str  # as far as the model read it (a prompt too long for it is cut)
    text: str  # the generated continuation, decoded without special tokens
    maps: AttentionMaps  # prompt_length marks where the generated rows begin
    finished: str  # "end of sequence" or "length"


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen: greedy by default; sampled (reproducibly, by ``seed``)
    with ``sample``."""

    max_new_tokens: int = 20
    sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: bool = True  # at the end-of-sequence token

    def __post_init__(self) -> None:
        for name in ("sample", "stop"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} is True or False, not {getattr(self, name)!r}")
        for name in ("max_new_tokens", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{name} is a whole number, not {value!r}")
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UsageError(f"{name} is a number, not {value!r}")
            if not math.isfinite(value):
                raise UsageError(f"{name} must be a finite number, not {value}")
        if self.max_new_tokens < 1:
            raise UsageError("max_new_tokens must be at least 1")
        if self.temperature <= 0:
            raise UsageError("temperature must be above 0 (greedy decoding is sample=False)")
        if not 0 < self.top_p <= 1:
            raise UsageError("top_p must be above 0 and at most 1")
        # (a seed without sampling is harmless: greedy decoding is the same with any)
        shaping = [name for name in ("temperature", "top_p") if getattr(self, name) != 1.0]
        if shaping and not self.sample:
            raise UsageError(
                f"{' and '.join(shaping)} {'apply' if len(shaping) > 1 else 'applies'} only "
                "when sampling, which is off: add --sample (sample=True); without it the "
                "likeliest token is taken"
            )
