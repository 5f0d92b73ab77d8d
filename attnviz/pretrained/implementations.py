"""Attention functions attnviz hands transformers for a pass: registered under a name of
attnviz's own, the model switched to that name, and both put back afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def attention_implementation(model: Any, name: str) -> Iterator[None]:
    """Run ``model`` with the attention implementation ``name``; its own afterwards."""
    own = getattr(model.config, "_attn_implementation", None) or "eager"
    if own == name:
        yield
        return
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(own)


@contextlib.contextmanager
def running(
    model: Any, name: str, attention: Callable[..., Any], masks: Callable[..., Any] | None = None
) -> Iterator[None]:
    """While open, ``model``'s attention modules call ``attention`` (transformers' attention
    function signature), given their masks by ``masks`` (a function of transformers' mask
    interface); without ``masks`` transformers builds no mask at all. Whatever ``name``
    meant to transformers before is restored."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    functions = [(AttentionInterface, attention)]
    if masks is not None:
        functions.append((AttentionMaskInterface, masks))
    before = [
        (interface._global_mapping, interface._global_mapping.get(name))
        for interface, _ in functions
    ]
    for interface, function in functions:
        interface.register(name, function)
    try:
        with attention_implementation(model, name):
            yield
    finally:
        for registry, previous in before:
            if previous is None:
                registry.pop(name, None)
            else:
                registry[name] = previous
