"""Property-based tests: any text, any small stack, every mode."""

from __future__ import annotations

import io
import json
import re
import unicodedata
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

import attnviz
from attnviz.builtin import BuiltinConfig
from attnviz.choices import Projections
from attnviz.errors import UsageError
from attnviz.maps import AttentionMaps
from attnviz.render.terminal import render

# Any code point that can stand in a Python str read from UTF-8 text (no lone surrogates).
texts = st.text(st.characters(exclude_categories=("Cs",)), min_size=0, max_size=40)
stacks = st.builds(
    lambda layers, heads, per_head, seed, positions: BuiltinConfig(
        num_layers=layers, num_heads=heads, d_model=heads * per_head, seed=seed, positions=positions
    ),
    layers=st.integers(1, 3),
    heads=st.integers(1, 4),
    per_head=st.integers(1, 6),
    seed=st.integers(0, 2**31),
    positions=st.booleans(),
)
modes = st.sampled_from(["self", "masked", "cross"])
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def visible(text: str) -> bool:
    return bool(text.strip()) and bool(attnviz.builtin.tokenizer.tokenize(text))


@given(config=stacks, projections=st.sampled_from(list(Projections)), lowercase=st.booleans())
def test_a_stack_is_rebuilt_from_its_name(config, projections, lowercase):
    config = replace(config, projections=projections, lowercase=lowercase)
    assert BuiltinConfig.from_name(config.name) == config


def test_a_name_without_settings_is_the_default_stack_and_others_are_refused():
    assert (
        BuiltinConfig.from_name("builtin") == BuiltinConfig.from_name("builtin:") == BuiltinConfig()
    )
    for name in ("seed=1", "minilm", "builtins:seed=1"):
        with pytest.raises(ValueError, match="does not name the built-in stack"):
            BuiltinConfig.from_name(name)


@SETTINGS
@given(text=texts, target=texts, config=stacks, mode=modes)
def test_any_text_gives_attention_or_a_usage_error(text, target, config, mode):
    cross = mode == "cross"
    try:
        maps = attnviz.extract(text, mode=mode, target=target if cross else None, config=config)
    except UsageError:
        assert not visible(text) or (cross and not visible(target))
        return
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    assert maps.weights.shape == (config.num_layers, config.num_heads, queries, keys)
    assert np.isfinite(maps.weights).all() and (maps.weights >= 0).all()
    np.testing.assert_allclose(maps.weights.sum(-1), 1.0, atol=1e-5)
    if mode == "masked":
        assert (
            maps.weights[..., np.triu_indices(keys, 1)[0], np.triu_indices(keys, 1)[1]] == 0
        ).all()
    again = AttentionMaps.from_dict(json.loads(json.dumps(maps.to_dict())))
    assert np.array_equal(again.weights, maps.weights)
    assert again.query_tokens == maps.query_tokens and again.key_tokens == maps.key_tokens


def _dangerous(character: str) -> bool:
    category = unicodedata.category(character)
    return (category == "Cc" and character != "\n") or (
        category in ("Cf", "Zl", "Zp") and (character not in "\u200c\u200d")
    )


@SETTINGS
@given(text=texts.filter(visible), colour=st.booleans(), width=st.integers(30, 160))
def test_no_control_character_from_the_input_reaches_the_terminal(text, colour, width):
    maps = attnviz.extract(text, layers=0, heads=0, config=BuiltinConfig(d_model=8, num_heads=1))
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        color_system="truecolor" if colour else None,
        force_terminal=colour,
        markup=False,
        emoji=False,
        highlight=False,
    )
    console.print(render(maps, width=width, use_colour=colour))
    printed = out.getvalue()
    # Our own colours are the only escape sequences; strip them, then nothing may be left.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", printed)
    assert not [c for c in plain if _dangerous(c)]
    from rich.cells import cell_len

    assert all(cell_len(line) <= width for line in plain.splitlines())
