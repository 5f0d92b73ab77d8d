"""Activations by name on every stack attnviz reads, not only a causal language model's:
an encoder's (BERT), an encoder-decoder's encoder, decoder and cross-attention (BART,
T5), and decoders without their language-model head. Each site equals a plain
transformers hook's tensor (tests/hook_references.py, from each layer's forward code),
each pattern transformers' own attention weights, and an edit the same edit by a hook."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnviz
from attnviz.errors import UsageError
from tests.hook_references import (
    layers_of,
    recorded_by,
    site_point,
    stack_layers,
    stack_site_point,
)

TEXT, TARGET = "The man walked the dog", "Hello I love you"
SITES = ["resid", "attn", "resid_mid", "mlp", "resid_post", "q", "k", "v", "z"]
# (family, the stack read, its mode): a text alone is read by the encoder; a target by
# the decoder, through its self-attention (masked) or its cross-attention over the text
MODES = {"bert": ["self"], "bart": ["self", "masked", "cross"], "t5": ["self", "masked", "cross"]}
STACKS = [
    (family, "encoder" if mode == "self" else "decoder", mode)
    for family, modes in MODES.items()
    for mode in modes
]
HEADLESS = ["gpt2", "llama", "mistral", "gemma2", "gemma3"]


@pytest.fixture(scope="module")
def loaded(tiny):
    return {family: attnviz.load(tiny[family]) for family in ("bert", "bart", "t5", *HEADLESS)}


def _arguments(path, model, mode):
    """The model's inputs as its own tokenizer makes them: the text, and the target where
    a decoder reads one (else, for an encoder-decoder, one token, as attnviz gives it)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    arguments = dict(tokenizer(TEXT, return_tensors="pt"))
    if mode != "self":
        target = tokenizer(text_target=TARGET, return_tensors="pt")["input_ids"]
        arguments["decoder_input_ids"] = target
        arguments["decoder_attention_mask"] = torch.ones_like(target)
    elif model.config.is_encoder_decoder:
        arguments["decoder_input_ids"] = torch.zeros(1, 1, dtype=torch.long)
    return arguments


def _asked(mode):
    return {} if mode == "self" else {"target": TARGET, "mode": mode}


@pytest.mark.parametrize(("family", "stack", "mode"), STACKS)
def test_every_site_of_every_stack_is_the_tensor_a_plain_hook_reads(
    loaded, tiny, family, stack, mode
):
    extractor = loaded[family]
    model = extractor.loaded.model
    arguments = _arguments(tiny[family], model, mode)
    found = extractor.activations(TEXT, SITES, **_asked(mode))
    layers = len(stack_layers(model, stack))
    assert layers >= 2
    for site in SITES:
        points = [stack_site_point(model, stack, mode == "cross", site, n) for n in range(layers)]
        reference = recorded_by(model, arguments, points)
        for layer, expected in enumerate(reference):
            got = found[f"{site}@{layer}"]
            assert torch.equal(got.reshape(expected.shape), expected), (site, layer)
    queries = arguments["decoder_input_ids" if mode != "self" else "input_ids"].shape[1]
    keys = arguments["input_ids"].shape[1] if mode != "masked" else queries
    assert found["z@0"].shape[0] == queries and found["k@0"].shape[0] == keys
    assert found.logits is None


@pytest.mark.parametrize(("family", "stack", "mode"), STACKS)
def test_a_pattern_is_transformers_own_attention_weights(loaded, tiny, family, stack, mode):
    extractor = loaded[family]
    model = extractor.loaded.model
    found = extractor.activations(TEXT, ["pattern"], positions="0,-1", **_asked(mode))
    own = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**_arguments(tiny[family], model, mode), output_attentions=True)
    finally:
        model.set_attn_implementation(own)
    weights = {
        "self": getattr(out, "encoder_attentions", None) or getattr(out, "attentions", None),
        "masked": getattr(out, "decoder_attentions", None),
        "cross": getattr(out, "cross_attentions", None),
    }[mode]
    assert weights is not None and len(weights) >= 2
    for layer, expected in enumerate(weights):
        last = expected.shape[2] - 1
        torch.testing.assert_close(
            found[f"pattern@{layer}"], expected[0][:, [0, last]], rtol=0, atol=1e-6
        )


@pytest.mark.parametrize("family", HEADLESS)
def test_a_decoder_without_its_head_reads_its_sites_and_refuses_logits(loaded, tiny, family):
    extractor = loaded[family]
    model = extractor.loaded.model
    arguments = _arguments(tiny[family], model, "self")
    found = extractor.activations(TEXT, SITES)
    for site in SITES:
        points = [site_point(model, site, n)[:2] for n in range(len(layers_of(model)))]
        points = [(module, "post" if kind == "post" else "pre") for module, kind in points]
        for layer, tensor in enumerate(recorded_by(model, arguments, points)):
            expected = tensor[:, site_point(model, site, layer)[2]]
            assert torch.equal(found[f"{site}@{layer}"].reshape(expected.shape), expected)
    with pytest.raises(UsageError, match="reads no next token: the logits"):
        extractor.activations(TEXT, ["logits"])


def _residual_after_attention(block, stack, cross):
    """Where the residual between the attention and the MLP is held, read in each layer's
    forward code: (module, "post") where a module outputs it (BERT's attention block,
    BART's norm after the attention), (module, "pre") where a sublayer takes it whole and
    adds to it (T5's next sublayer)."""
    if hasattr(block, "intermediate"):
        return block.attention, "post"
    if hasattr(block, "fc1"):
        return (block.encoder_attn_layer_norm if cross else block.self_attn_layer_norm), "post"
    return block.layer[2 if cross else 1], "pre"


def _replacing(change):
    """Hooks of both kinds putting ``change(hidden)`` in the place of a module's tensor."""

    def before(_m, args, kwargs):
        hidden = change((args[0] if args else kwargs["hidden_states"]).clone())
        return (
            ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})
        )

    def after(_m, _a, out):
        hidden = change((out[0] if isinstance(out, tuple) else out).clone())
        return (hidden, *out[1:]) if isinstance(out, tuple) else hidden

    return before, after


@pytest.mark.parametrize(("family", "stack", "mode"), [STACKS[0], STACKS[3], STACKS[5]])
def test_an_edit_of_a_stack_equals_the_same_edit_by_a_plain_hook(loaded, tiny, family, stack, mode):
    extractor = loaded[family]
    model = extractor.loaded.model
    cross = mode == "cross"
    edits = {"a0.h1": "zero", "resid_mid@1": "mean"}
    hooks_before = _hooks(model)  # transformers' own (its output capturing)
    found = extractor.activations(TEXT, ["resid_post@-1", "z@0"], edits=edits, **_asked(mode))
    size = found["z@0"].shape[-1]
    assert not found["z@0"][:, 1].any() and found["z@0"][:, 0].any()

    def zero_head(hidden):
        hidden[..., size : 2 * size] = 0
        return hidden

    output, _ = stack_site_point(model, stack, cross, "z", 0)
    layers = stack_layers(model, stack)
    residual, kind = _residual_after_attention(layers[1], stack, cross)
    mean_before, mean_after = _replacing(
        lambda hidden: hidden.mean(1, keepdim=True).expand_as(hidden).clone()
    )
    handles = [
        output.register_forward_pre_hook(_replacing(zero_head)[0], with_kwargs=True),
        residual.register_forward_pre_hook(mean_before, with_kwargs=True)
        if kind == "pre"
        else residual.register_forward_hook(mean_after),
    ]
    last = [stack_site_point(model, stack, cross, "resid_post", len(layers) - 1)]
    try:
        (expected,) = recorded_by(model, _arguments(tiny[family], model, mode), last)
    finally:
        for handle in handles:
            handle.remove()
    torch.testing.assert_close(found["resid_post@-1"], expected, rtol=0, atol=1e-6)
    unedited = extractor.activations(TEXT, ["resid_post@-1"], **_asked(mode))["resid_post@-1"]
    assert not torch.allclose(unedited, expected, atol=1e-3)  # the edits changed the run
    assert _hooks(model) == hooks_before


def _hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_acts_reads_an_encoder_decoders_cross_attention_from_a_shell(runner, loaded, tiny):
    from attnviz.cli import app

    arguments = ["acts", TEXT, "--model", tiny["bart"], "--target", TARGET, "-m", "cross"]
    arguments += ["--site", "k@0", "--site", "pattern@1", "-f", "json"]
    wrote = runner.invoke(app, arguments)
    assert wrote.exit_code == 0, wrote.stderr
    read = json.loads(wrote.stdout)["activations"]
    expected = loaded["bart"].activations(TEXT, ["k@0", "pattern@1"], target=TARGET, mode="cross")
    for name in ("k@0", "pattern@1"):
        assert read[name]["shape"] == list(expected[name].shape)
        np.testing.assert_array_equal(np.array(read[name]["values"]), expected[name].numpy())
    sources = len(loaded["bart"].extract(TEXT).key_tokens)
    assert read["k@0"]["shape"][0] == sources and read["pattern@1"]["shape"][2] == sources
    refused = runner.invoke(app, ["acts", TEXT, "--model", tiny["bert"], "--site", "logits"])
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "reads no next token" in refused.stderr and "Traceback" not in refused.stderr
