"""A backward pass that fits: from a metric down to each layer's activations, with each
layer computed again in the backward pass on long texts instead of keeping every
activation (attention's fused output kept), and the weights left without gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from attnviz.errors import UsageError, is_out_of_memory
from attnviz.memory import give_back_freed
from attnviz.pretrained.anatomy import Anatomy

if TYPE_CHECKING:
    import torch


def backward_to(value: torch.Tensor, down_to: Any) -> tuple[torch.Tensor | None, ...]:
    """The backward pass from ``value`` down to ``down_to`` (a tensor or a list of them),
    its hooks reading each layer: the gradient of each (None where ``value`` does not
    depend on it)."""
    import torch

    try:
        return torch.autograd.grad(value, down_to, allow_unused=True)
    except RuntimeError as error:
        if is_out_of_memory(error):  # the text's length, not the model: said as such
            raise
        raise UsageError(f"--method gradient cannot read this model: {error}") from None


# Bytes the backward pass may keep of a forward's activations before each layer is
# computed again in the backward pass instead (activation checkpointing): all but its
# attention, whose output is kept, for memory that no longer grows with what every layer
# computes.
KEPT_FOR_BACKWARD = 2 * 2**30


def recomputed_when_long(
    model: Any, body: Anatomy, arguments: dict
) -> contextlib.AbstractContextManager:
    """Each layer computed again in the backward pass (:func:`_recomputed`) where one
    forward pass of ``arguments`` would keep more than :data:`KEPT_FOR_BACKWARD` for it."""
    if recomputes(model, arguments):
        return _recomputed(body.blocks)
    return contextlib.nullcontext()


def recomputes(model: Any, arguments: dict) -> bool:
    """Whether :func:`recomputed_when_long` computes layers again for ``arguments``."""
    return _kept_for_backward(model, arguments) > KEPT_FOR_BACKWARD


def _kept_for_backward(model: Any, arguments: dict) -> int:
    """About what one forward pass keeps for the activations' gradients: per layer and
    token, the norms' and attention's inputs and outputs (~6 widths) and the MLP's
    (~3 of its widths), in float32."""
    config = model.config
    width = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0))
    inner = int(
        getattr(config, "intermediate_size", 0) or getattr(config, "n_inner", 0) or 4 * width
    )
    layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0))
    tokens = int(arguments["input_ids"].numel())
    return tokens * layers * (6 * width + 3 * inner) * 4


# PyTorch's fused attention kernels: what they return (the output, and the softmax's
# log-sum-exp that their backward reads) is a few numbers per token and head, and they
# cost most of a layer on a long text. The unfused path is left out: it keeps T × T.
_FUSED_ATTENTION = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)


# On the CPU, a fused attention call over at most this many keys (a sliding window's
# blocks) is computed again in the backward pass, not kept: over 2,048 keys a query's
# scores and sum cost about what a layer's MLP does for its token (Gemma 3: 2.1 of 3.9 M
# products), and its output is as large as the layer's input (at 8,192 tokens, 15 of
# Gemma 3's 18 layers: 0.5 GiB). A GPU keeps them: there Gemma 3's estimate at 32,768
# tokens met its memory target keeping them, and its time target was missed in a run
# computing them again (docs/performance.md).
_KEYS_RECOMPUTED_AT_MOST = 2048


def attention_kept(key: torch.Tensor) -> bool:
    """Whether a recomputed layer keeps a fused attention call's output, given its keys
    (B, K, T, D): on a GPU always, on the CPU over more than _KEYS_RECOMPUTED_AT_MOST."""
    return key.device.type != "cpu" or key.shape[-2] > _KEYS_RECOMPUTED_AT_MOST


@contextlib.contextmanager
def _recomputed(blocks: Sequence[Any]) -> Iterator[None]:
    """While open, each layer keeps only its input and its fused attention's outputs over
    long key spans for the backward pass and computes the rest again there (torch's
    non-reentrant, selective checkpointing: the graph, and the gradients of the
    activations inside a layer, stay as they were). Recomputing a global attention would
    cost most of a forward pass; a sliding window's costs less than its layer's MLP."""
    import functools

    import torch
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    kept = {getattr(torch.ops.aten, name).default for name in _FUSED_ATTENTION}

    def policy(_context: Any, operation: Any, *args: Any, **_kwargs: Any) -> CheckpointPolicy:
        if operation in kept and attention_kept(args[1]):  # (query, key, value, …)
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    contexts = functools.partial(create_selective_checkpoint_contexts, policy)
    for block in blocks:

        def layer(*args: Any, _forward: Callable = block.forward, **kwargs: Any) -> Any:
            # Run before each layer, forward and again in the backward pass: what the last
            # layer freed would otherwise stay in this process (glibc), pinned by what
            # each layer keeps.
            give_back_freed()
            return _forward(*args, **kwargs)

        def recomputed(*args: Any, _layer: Callable = layer, **kwargs: Any) -> Any:
            return checkpoint(_layer, *args, use_reentrant=False, context_fn=contexts, **kwargs)

        block.forward = recomputed  # an instance attribute: nn.Module calls it in its place
    try:
        yield
    finally:
        for block in blocks:
            del block.forward


@contextlib.contextmanager
def weights_without_gradients(model: Any) -> Iterator[None]:
    """While open, no weight asks for a gradient (each is given back as it was): the
    forward pass then keeps only what the activations' gradients need, not every matmul's
    input for its weight's gradient (at 8,000 tokens, gigabytes)."""
    asking = [parameter for parameter in model.parameters() if parameter.requires_grad]
    for parameter in asking:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter in asking:
            parameter.requires_grad_(True)
