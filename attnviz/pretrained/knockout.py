"""Attention knockout (Geva et al. 2023, "Dissecting Recall of Factual Associations"): the
answer's log-probability when some query rows may not read some keys, in a window of
layers around each chosen layer.

The block is made in the mask each attention module is given, as the model's own
masking hides a key: the blocked keys' scores become the lowest number, and the row's
softmax renormalises over the keys it may still read. Not a weight zeroed afterwards.

Shape letters: B rows of a pass, T query tokens, S key tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.errors import UsageError
from attnviz.pretrained.anatomy import Anatomy
from attnviz.pretrained.effects import Change, changed_metrics, clean_pass
from attnviz.pretrained.metrics import Metric
from attnviz.pretrained.sites import hooked

if TYPE_CHECKING:
    import torch


def windows(layers: Sequence[int], window: int, count: int) -> list[tuple[int, int]]:
    """The first and last layer knocked out around each of ``layers``: ``window`` layers
    centred on it (an even window's earlier middle layer), cut to the model's (the
    request checked ``window``)."""
    before = (window - 1) // 2
    return [
        (max(0, layer - before), min(count - 1, layer - before + window - 1)) for layer in layers
    ]


def check_rows(rows: Sequence[int], span: Sequence[int]) -> None:
    """Every knocked row keeps a key to read (itself, at least, unless it is in the span)."""
    blocked = set(span)
    for row in rows:
        if all(key in blocked for key in range(row + 1)):
            raise UsageError(
                f"the knockout leaves query row {row} no key to read: every key up to it is "
                "in the span"
            )


def knockout(
    model: Any,
    body: Anatomy,
    arguments: dict[str, torch.Tensor],
    metric: Metric,
    rows: Sequence[int],
    span: Sequence[int],
    spans: Sequence[tuple[int, int]],
) -> tuple[float, np.ndarray]:
    """The clean metric after one encoded text (the answer's log-probability), and its change when
    the query ``rows`` may not read the ``span`` keys in each window of layers (first,
    last) of ``spans``: (len(spans),)."""
    import torch

    check_rows(rows, span)
    tokens = int(arguments["input_ids"].shape[1])

    def blocked(first: int, last: int) -> Change:
        def install(patches: contextlib.ExitStack, batch_rows: list[int], batch: int) -> None:
            hook = _blocker(batch_rows, batch, rows, span, tokens)
            for layer in range(first, last + 1):
                attention = body.attentions[layer]
                handle = attention.register_forward_pre_hook(hook, with_kwargs=True)
                patches.enter_context(hooked(handle))

        return Change(first, install)

    with torch.inference_mode():
        clean = clean_pass(model, body, arguments, metric)
        changes = [blocked(first, last) for first, last in spans]
        effects = changed_metrics(model, body, arguments, metric, clean, changes, "knockout")
    if not all(np.isfinite(effects)):
        raise UsageError("the knockout leaves a query row no key to read in a layer's own mask")
    return clean.metric, np.array(effects)


def _blocker(
    batch_rows: list[int], batch: int, rows: Sequence[int], span: Sequence[int], tokens: int
) -> Callable:
    """A hook on an attention module: its mask, in the batch's ``batch_rows``, hides the
    ``span`` keys from the query ``rows``. A module given no mask is causal (transformers
    leaves the mask out where the kernel can be told is_causal): its mask is made whole."""
    import torch

    def block(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        mask = kwargs.get("attention_mask")
        device = (args[0] if args else kwargs["hidden_states"]).device
        if mask is None:
            causal = torch.ones(tokens, tokens, dtype=torch.bool, device=device).tril()
            mask = causal[None, None]  # (1, 1, T, S): True where a query may read a key
        hidden = torch.zeros(batch, 1, mask.shape[-2], mask.shape[-1], dtype=torch.bool)
        picked = torch.as_tensor(batch_rows)[:, None, None]
        hidden[
            picked, 0, torch.as_tensor(list(rows))[None, :, None], torch.as_tensor(list(span))
        ] = True
        hidden = hidden.to(device)
        mask = mask.expand(batch, *mask.shape[1:])
        if mask.dtype == torch.bool:
            mask = mask & ~hidden
        else:  # added to the scores
            mask = mask.masked_fill(hidden, torch.finfo(mask.dtype).min)
        return args, {**kwargs, "attention_mask": mask}

    return block
