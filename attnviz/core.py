"""Text in, AttentionMaps out: the one entry point every command and script uses."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from attnviz.errors import UsageError
from attnviz.maps import AttentionMaps
from attnviz.selection import resolve
from attnviz.tokens import tokenize

if TYPE_CHECKING:
    from attnviz.builtin import BuiltinConfig

BUILTIN = "builtin"


class Mode(StrEnum):
    SELF = "self"  # every token attends to every token
    MASKED = "masked"  # causal: a token attends to itself and the tokens before it
    CROSS = "cross"  # target tokens attend over source tokens


Selection = str | int | Sequence[int] | None


def extract(
    text: str,
    *,
    model: str = BUILTIN,
    mode: Mode | str = Mode.SELF,
    target: str | None = None,
    layers: Selection = None,
    heads: Selection = None,
    config: BuiltinConfig | None = None,
    lowercase: bool = True,
) -> AttentionMaps:
    """Run ``text`` through a model and return the attention maps of the chosen layers and heads.

    ``mode`` is ``"self"``, ``"masked"`` (causal) or ``"cross"``; cross mode
    needs ``target``, whose tokens become the queries (rows) while the tokens of
    ``text`` are the keys (columns). ``layers`` and ``heads`` take an index, a
    list, a range string such as ``"0-2"``, ``"all"`` or ``None`` (all).
    ``config`` sets the size and seed of the built-in stack.
    """
    mode = _parse_mode(mode)
    _check_text(text, "text")
    if mode is Mode.CROSS:
        if target is None:
            raise UsageError(
                "cross mode needs a target text (--target): its tokens are the queries"
            )
        _check_text(target, "target")
    elif target is not None:
        raise UsageError(f"a target text only applies to cross mode, not {mode.value} mode")
    if model != BUILTIN:
        raise UsageError(f"unknown model {model!r}: only the built-in stack ({BUILTIN!r}) is known")
    return _extract_builtin(text, mode, target, layers, heads, config, lowercase)


def _parse_mode(mode: Mode | str) -> Mode:
    try:
        return Mode(mode)
    except ValueError:
        names = ", ".join(member.value for member in Mode)
        raise UsageError(f"unknown mode {mode!r}: choose one of {names}") from None


def _check_text(text: str, what: str) -> None:
    if not text or not text.strip():
        raise UsageError(f"the {what} is empty: give some words to look at")


def _extract_builtin(
    text: str,
    mode: Mode,
    target: str | None,
    layers: Selection,
    heads: Selection,
    config: BuiltinConfig | None,
    lowercase: bool,
) -> AttentionMaps:
    import torch

    from attnviz.builtin import BuiltinConfig, BuiltinTransformer

    config = config or BuiltinConfig()
    layer_indices = resolve(layers, config.layers, "layer")
    head_indices = resolve(heads, config.heads, "head")
    source = [token.text for token in tokenize(text, lowercase=lowercase)]
    queries = source
    target_tokens = None
    if mode is Mode.CROSS:
        target_tokens = queries = [token.text for token in tokenize(target, lowercase=lowercase)]
    stack = BuiltinTransformer(config)
    per_layer = stack.attention_maps(
        source, mode=mode.value, target_tokens=target_tokens, layers=layer_indices
    )
    weights = torch.stack([per_layer[layer][head_indices] for layer in layer_indices])
    return AttentionMaps(
        query_tokens=queries,
        key_tokens=source,
        weights=weights.numpy(),  # (L, H, T, S)
        layers=layer_indices,
        heads=head_indices,
        mode=mode.value,
        model=config.name,
        text=text,
        target=target,
    )
