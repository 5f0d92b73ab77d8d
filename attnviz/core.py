"""Text in, AttentionMaps out: the one entry point every command and script uses."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

from attnviz.errors import UsageError, warn
from attnviz.maps import AttentionMaps
from attnviz.selection import resolve
from attnviz.tokens import Token, tokenize

if TYPE_CHECKING:
    from attnviz.builtin import BuiltinConfig
    from attnviz.pretrained import LoadOptions

BUILTIN = "builtin"
# The built-in stack keeps whole (tokens x tokens) maps in memory: 4,096 tokens
# peak under 1 GB (benchmarks/memory.py); longer texts are cut, with a warning.
BUILTIN_MAX_TOKENS = 4096


class Mode(StrEnum):
    SELF = "self"  # every token attends to every token
    MASKED = "masked"  # causal: a token attends to itself and the tokens before it
    CROSS = "cross"  # target tokens attend over source tokens


Selection = str | int | Sequence[int] | None


def extract(
    text: str,
    *,
    model: str = BUILTIN,
    mode: Mode | str | None = None,
    target: str | None = None,
    layers: Selection = None,
    heads: Selection = None,
    config: BuiltinConfig | None = None,
    lowercase: bool = True,
    special: bool = True,
    words: bool = False,
    load_options: LoadOptions | None = None,
) -> AttentionMaps:
    """Run ``text`` through a model and return the attention maps of the chosen layers and heads.

    ``model`` is ``"builtin"`` (the seeded stack), an alias such as ``"minilm"``,
    a directory saved with ``save_pretrained`` or a Hugging Face id (used from
    the local cache; ``load_options`` may allow a download). ``mode`` is
    ``"self"``, ``"masked"`` (causal) or ``"cross"``, by default the model's
    natural one; in cross mode the tokens of ``target`` are the queries (rows)
    and the tokens of ``text`` the keys (columns). ``layers`` and ``heads``
    take an index, a list, a range string such as ``"0-2"``, ``"all"`` or
    ``None`` (all).

    Built-in stack only: ``config`` (size and seed) and ``lowercase``.
    Pretrained models only: ``special=False`` drops special tokens and
    renormalises rows; ``words=True`` merges sub-word pieces into words.
    """
    mode = None if mode is None else _parse_mode(mode)
    check_text(text, "text")
    if target is not None:
        check_text(target, "target")
    if model == BUILTIN:
        if words or not special:
            raise UsageError("special tokens and sub-word pieces exist only in pretrained models")
        mode = mode or Mode.SELF
        if mode is Mode.CROSS and target is None:
            raise UsageError(
                "cross mode needs a target text (--target): its tokens are the queries"
            )
        if mode is not Mode.CROSS and target is not None:
            raise UsageError(f"a target text only applies to cross mode, not {mode.value} mode")
        return _extract_builtin(text, mode, target, layers, heads, config, lowercase)
    if config is not None or not lowercase:
        raise UsageError("the built-in stack's settings do not apply to a pretrained model")
    from attnviz.pretrained import LoadOptions, extract_pretrained, load

    return extract_pretrained(
        load(model, load_options or LoadOptions()),
        text,
        mode=None if mode is None else mode.value,
        target=target,
        layers=layers,
        heads=heads,
        special=special,
        words=words,
    )


def _parse_mode(mode: Mode | str) -> Mode:
    try:
        return Mode(mode)
    except ValueError:
        names = ", ".join(member.value for member in Mode)
        raise UsageError(f"unknown mode {mode!r}: choose one of {names}") from None


def check_text(text: str, what: str) -> None:
    if not text or not text.strip():
        raise UsageError(f"the {what} is empty: give some words to look at")


def _truncated(tokens: list[Token], what: str) -> list[str]:
    if len(tokens) > BUILTIN_MAX_TOKENS:
        warn(
            f"the {what} has {len(tokens)} tokens; the built-in stack reads at most "
            f"{BUILTIN_MAX_TOKENS}: the last {len(tokens) - BUILTIN_MAX_TOKENS} were dropped"
        )
    return [token.text for token in tokens[:BUILTIN_MAX_TOKENS]]


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
    source = _truncated(tokenize(text, lowercase=lowercase), "text")
    queries = source
    target_tokens = None
    if mode is Mode.CROSS:
        target_tokens = queries = _truncated(tokenize(target, lowercase=lowercase), "target")
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
