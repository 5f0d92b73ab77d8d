"""The logit lens of a decoder: each layer's residual stream (what it hands on) through
the final norm, at that residual's own scale, and the unembedding, at every position:
the next token each layer would predict if the model ended there.

Shape letters: L layers, T tokens, D the model's width, V the vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import Site
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.effects import last_logits
from attnviz.pretrained.sites import recorded

if TYPE_CHECKING:
    import torch

_LOGITS_PER_BLOCK = 2**24  # positions × vocabulary read at once: 64 MiB of float32


def logit_lens(
    model: Any, body: Anatomy, arguments: dict, answer_id: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(L, T) each layer and position's likeliest next token, its probability and the
    answer token's log-probability (None without an answer), from one forward pass."""
    import torch

    with torch.inference_mode():
        with recorded(model, body, Site.RESID_POST) as residuals:
            last_logits(model, arguments)
        read = [_read(model, body, residual[0], answer_id) for residual in residuals]
    top_ids, probability, answer = (np.stack(part) for part in zip(*read, strict=True))
    return top_ids, probability, (None if answer_id is None else answer)


def _read(
    model: Any, body: Anatomy, residual: torch.Tensor, answer_id: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One layer's (T, D) residual read through the final norm and the unembedding, a
    block of positions at a time: (T) top ids, their probabilities, the answer's
    log-probabilities (zeros without an answer)."""
    import torch

    vocabulary = body.unembedding.weight.shape[0]
    rows = max(1, _LOGITS_PER_BLOCK // vocabulary)
    found: list[list[torch.Tensor]] = [[], [], []]
    for start in range(0, residual.shape[0], rows):
        logits = body.unembedding(body.norm(residual[start : start + rows])).float()  # (R, V)
        cap = getattr(model.config, "final_logit_softcapping", None)
        if cap:  # as the model's own output is squashed (Gemma 2)
            logits = torch.tanh(logits / cap) * cap
        log_probs = logits.log_softmax(-1)
        best, ids = log_probs.max(-1)
        found[0].append(ids)
        found[1].append(best.exp())
        found[2].append(log_probs[:, answer_id] if answer_id is not None else best * 0)
    return tuple(torch.cat(part).cpu().numpy() for part in found)  # type: ignore[return-value]
