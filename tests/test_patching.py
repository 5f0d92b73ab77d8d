"""Patching between a clean text and its corrupted twin, a second answer's logit
difference, the layer × position trace and the gradient estimates, each held to a
reference written here from plain transformers hooks (none of attnviz's code), on tiny
random GPT-2, Llama (grouped-query heads) and Gemma 2 (post-attention norms, sliding
windows)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnviz
from attnviz.cli import app
from attnviz.request import Input, Request
from tests.hook_references import (
    answer_token_id,
    layers_of,
    metric_with_hooks,
    output_projection,
    recorded_at,
    reference_gradients,
    reference_patch,
    reference_trace,
    token_ids,
)

TEXT = "The man walked the dog because"
CORRUPT = "The dog walked the man because"  # as many tokens in every tiny tokenizer
ANSWER, VERSUS = " it", " the"
FAMILIES = ["gpt2-lm", "llama-lm", "gemma2-lm"]


@pytest.fixture(scope="module")
def loaded(generators):
    """Each family's extractor and model (eval, as attnviz loads it)."""
    return {family: attnviz.load(generators[family]) for family in FAMILIES}


def _setup(generators, loaded, family, versus=False):
    extractor = loaded[family]
    path = generators[family]
    ids = token_ids(path, TEXT), token_ids(path, CORRUPT)
    assert ids[0].shape == ids[1].shape, "the corrupted text must keep the token count"
    answer_id = answer_token_id(path, TEXT, ANSWER)
    versus_id = answer_token_id(path, TEXT, VERSUS) if versus else None
    return extractor, extractor.loaded.model, ids, answer_id, versus_id


@pytest.mark.parametrize(
    ("family", "versus"), [(family, False) for family in FAMILIES] + [("llama-lm", True)]
)
def test_patch_equals_a_hook_restoring_each_heads_clean_output(generators, loaded, family, versus):
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = _setup(
        generators, loaded, family, versus
    )
    found = extractor.head_statistics(
        TEXT, answer=ANSWER, versus=VERSUS if versus else None, corrupt=CORRUPT
    ).effects
    corrupt, expected = reference_patch(model, family, clean_ids, corrupt_ids, answer_id, versus_id)
    np.testing.assert_allclose(found.patch, expected, atol=1e-5)
    assert found.on.corrupt_metric == pytest.approx(corrupt, abs=1e-5)
    assert found.on.clean_metric == pytest.approx(
        metric_with_hooks(model, clean_ids, answer_id, versus_id), abs=1e-5
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_versus_makes_the_metric_a_logit_difference(generators, loaded, family):
    """ablation: a hook zeroing each head, measured as logit(answer) − logit(versus); dla
    is linear in the unembedding row, so with --versus it is the answer's less the
    versus answer's."""
    extractor, model, (clean_ids, _), answer_id, versus_id = _setup(
        generators, loaded, family, versus=True
    )
    found = extractor.head_effects(TEXT, ANSWER, versus=VERSUS)
    clean = metric_with_hooks(model, clean_ids, answer_id, versus_id)
    heads = model.config.num_attention_heads
    size = model.config.hidden_size // heads if family == "gpt2-lm" else model.config.head_dim
    for layer in range(len(layers_of(model, family))):
        for head in range(heads):
            part = slice(head * size, (head + 1) * size)

            def zero(_m, args, kwargs, part=part):
                changed = args[0].clone()
                changed[..., part] = 0
                return (changed, *args[1:]), kwargs

            hooks = [(output_projection(model, family, layer), "pre", zero)]
            expected = metric_with_hooks(model, clean_ids, answer_id, versus_id, hooks) - clean
            assert found.ablation[layer, head] == pytest.approx(expected, abs=1e-5)
    answer_dla = extractor.head_effects(TEXT, ANSWER).dla
    versus_dla = extractor.head_effects(TEXT, VERSUS).dla
    np.testing.assert_allclose(found.dla, answer_dla - versus_dla, atol=1e-5)
    assert found.on.clean_metric == pytest.approx(clean, abs=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("site", ["resid", "attn", "mlp"])
def test_trace_equals_a_hook_restoring_each_layer_and_position(generators, loaded, family, site):
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = _setup(
        generators, loaded, family, versus=site == "attn"
    )
    given = Input(TEXT, answer=ANSWER, versus=VERSUS if site == "attn" else None, corrupt=CORRUPT)
    (found,) = extractor.run([given], Request(maps=False, trace=site))
    expected = reference_trace(model, family, clean_ids, corrupt_ids, answer_id, versus_id, site)
    np.testing.assert_allclose(found.trace.effect, expected, atol=1e-5)
    assert len(found.trace.tokens) == clean_ids.shape[1] == len(found.trace.corrupt_tokens)


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_estimates_equal_autograd_through_kept_activations(generators, loaded, family):
    """ablation: Σ ∂m/∂z · (0 − z) at the clean run; patch: Σ ∂m/∂z · (z_clean − z) at the
    corrupted run; trace: ∂m/∂a · (a_clean − a) at each position of the corrupted run."""
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = _setup(
        generators, loaded, family, versus=True
    )
    asking = [parameter.requires_grad for parameter in model.parameters()]
    found = extractor.head_statistics(
        TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT, method="gradient"
    ).effects
    assert [parameter.requires_grad for parameter in model.parameters()] == asking
    at_clean = reference_gradients(model, family, clean_ids, answer_id, versus_id, "heads")
    at_corrupt = reference_gradients(model, family, corrupt_ids, answer_id, versus_id, "heads")
    heads = model.config.num_attention_heads
    size = at_clean[0][0].shape[-1] // heads
    for layer, ((z, gradient), (z_corrupt, gradient_corrupt)) in enumerate(
        zip(at_clean, at_corrupt, strict=True)
    ):
        for head in range(heads):
            part = slice(head * size, (head + 1) * size)
            ablation = float((gradient[:, part] * -z[:, part]).sum())
            patch = float((gradient_corrupt[:, part] * (z[:, part] - z_corrupt[:, part])).sum())
            assert found.ablation[layer, head] == pytest.approx(ablation, abs=1e-5)
            assert found.patch[layer, head] == pytest.approx(patch, abs=1e-5)
    assert found.on.method == "gradient"
    (traced,) = extractor.run(
        [Input(TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT)],
        Request(maps=False, trace="mlp", method="gradient"),
    )
    clean_mlp = recorded_at(model, family, clean_ids, "mlp")
    corrupt_mlp = reference_gradients(model, family, corrupt_ids, answer_id, versus_id, "mlp")
    expected = np.stack(
        [
            ((clean - a) * gradient).sum(-1).double().numpy()
            for clean, (a, gradient) in zip(clean_mlp, corrupt_mlp, strict=True)
        ]
    )
    np.testing.assert_allclose(traced.trace.effect, expected, atol=1e-5)


def test_gradient_estimates_rank_heads_as_the_exact_sweep_on_a_smooth_change(generators, loaded):
    """Where the change is small (the mean instead of the output: a nearby point), the
    first-order estimate of each head's ablation is close to the exact one."""
    extractor = loaded["llama-lm"]
    exact = extractor.head_effects(TEXT, ANSWER, ablate="mean").ablation
    estimate = extractor.head_effects(TEXT, ANSWER, ablate="mean", method="gradient").ablation
    assert np.corrcoef(exact.ravel(), estimate.ravel())[0, 1] > 0.9


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["heads", TEXT, "--corrupt", CORRUPT], "--corrupt measures what heads do to an answer"),
        (["heads", TEXT, "--versus", VERSUS], "--versus measures what heads do to an answer"),
        (["heads", TEXT, "--answer", ANSWER, "--versus", ANSWER], "--versus is the answer itself"),
        (["trace", TEXT, "--answer", ANSWER], "give --corrupt"),
        (["trace", TEXT, "--corrupt", CORRUPT], "give --answer"),
        (["trace", TEXT, "--answer", ANSWER, "--corrupt", CORRUPT, "--site", "ffn"], "ffn"),
        (["heads", TEXT, "--method", "gradient"], "--method says how effects are measured"),
        (
            ["trace", TEXT, "--answer", ANSWER, "--corrupt", CORRUPT, "-o", "t.html", "-f", "csv"],
            "-o writes a picture or a page; -f writes data",
        ),
        (
            ["trace", TEXT, "--answer", ANSWER, "--corrupt", CORRUPT, "-o", "t.txt"],
            ".html",
        ),
    ],
)
def test_patching_usage_errors_before_a_model_loads(runner, arguments, message):
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_corrupted_text_of_another_length_is_refused_naming_both(runner, generators):
    path = generators["gpt2-lm"]
    result = runner.invoke(
        app, ["heads", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", "The dog"]
    )
    assert result.exit_code == 2 and result.stdout == ""
    assert "the corrupted text is 2 tokens and the text 6" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_encoder_has_no_answer_to_trace(runner, tiny):
    result = runner.invoke(
        app, ["trace", TEXT, "--model", tiny["bert"], "--answer", ANSWER, "--corrupt", CORRUPT]
    )
    assert result.exit_code == 2 and "--answer reads the next token" in result.stderr


def test_heads_with_a_corrupted_text_lists_patch_and_both_metrics(runner, generators):
    path = generators["llama-lm"]
    common = ["heads", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", CORRUPT]
    data = runner.invoke(app, [*common, "--versus", VERSUS, "-f", "json"])
    assert data.exit_code == 0, data.stderr
    document = json.loads(data.stdout)
    assert document["metric"] == "logit_difference" and document["versus"] == VERSUS
    assert {"clean_metric", "corrupt_metric", "corrupt"} <= set(document)
    assert all("patch" in row for row in document["heads"])
    table = runner.invoke(app, [*common, "--sort", "patch", "--top", "3"])
    assert table.exit_code == 0, table.stderr
    assert "patch" in table.stdout and "corrupted" in table.stdout
    plain = runner.invoke(app, ["heads", TEXT, "--model", path, "--answer", ANSWER, "-f", "json"])
    assert "patch" not in plain.stdout and "clean_metric" not in plain.stdout


def test_trace_draws_a_layers_by_tokens_map_and_writes_data(runner, generators, tmp_path):
    from transformers import AutoConfig

    path = generators["gpt2-lm"]
    common = ["trace", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", CORRUPT]
    drawn = runner.invoke(app, [*common, "--width", "100"])
    assert drawn.exit_code == 0, drawn.stderr
    assert "resid" in drawn.stdout and " dog " in drawn.stdout and "layer 1" in drawn.stdout
    data = runner.invoke(app, [*common, "--site", "mlp", "-f", "json"])
    document = json.loads(data.stdout)
    layers = AutoConfig.from_pretrained(path).n_layer
    assert document["site"] == "mlp" and document["layers"] == list(range(layers))
    assert len(document["effect"]) == layers
    assert len(document["effect"][0]) == len(document["tokens"]) == 6
    rows = runner.invoke(app, [*common, "-f", "csv"]).stdout.splitlines()
    assert rows[0].startswith("layer,position,token,corrupt_token,effect")
    assert len(rows) == 1 + layers * 6
    picture = tmp_path / "trace.png"
    saved = runner.invoke(app, [*common, "-o", str(picture)])
    assert saved.exit_code == 0, saved.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heads_draws_the_layers_by_heads_grid_of_an_effect(runner, generators, tmp_path):
    path = generators["llama-lm"]
    picture = tmp_path / "patch.svg"
    common = ["heads", TEXT, "--model", path, "--answer", ANSWER]
    drawn = runner.invoke(app, [*common, "--corrupt", CORRUPT, "--picture", str(picture)])
    assert drawn.exit_code == 0, drawn.stderr
    svg = picture.read_text()
    assert "<svg" in svg and "patch" in svg and "head" in svg
    refused = runner.invoke(app, ["heads", TEXT, "--model", path, "--picture", str(picture)])
    assert refused.exit_code == 2 and "--picture draws each head's effect" in refused.stderr
    wrong = runner.invoke(app, [*common, "--picture", str(tmp_path / "grid.txt")])
    assert wrong.exit_code == 2 and wrong.stdout == ""


def test_a_model_without_gradients_through_its_attention_is_refused(generators, monkeypatch):
    from attnviz.errors import UsageError

    extractor = attnviz.load(generators["llama-lm"])
    attention = extractor.loaded.model.model.layers[0].self_attn
    forward = attention.forward

    def without_gradients(*args, **kwargs):
        with torch.no_grad():
            return forward(*args, **kwargs)

    monkeypatch.setattr(attention, "forward", without_gradients)
    with pytest.raises(UsageError, match="--method gradient cannot read"):
        extractor.head_effects(TEXT, ANSWER, method="gradient")
    exact = extractor.head_effects(TEXT, ANSWER)  # the exact sweep needs no gradient
    assert np.isfinite(exact.ablation).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_gradient_estimates_are_the_same_with_each_layer_computed_again(
    generators, loaded, family, monkeypatch
):
    """Past KEPT_FOR_BACKWARD bytes of activations, each layer is recomputed in the backward
    pass (checkpointing): the estimates do not change."""
    from attnviz.pretrained import patching

    extractor = loaded[family]
    one_token = {"input_ids": torch.ones(1, 1, dtype=torch.long)}
    assert patching._kept_for_backward(extractor.loaded.model, one_token) > 0  # so 0 recomputes
    asked = {"versus": VERSUS, "corrupt": CORRUPT, "method": "gradient"}
    kept = extractor.head_effects(TEXT, ANSWER, **asked)
    traced = extractor.trace(TEXT, ANSWER, CORRUPT, site="attn", versus=VERSUS, method="gradient")
    monkeypatch.setattr(patching, "KEPT_FOR_BACKWARD", 0)
    again = extractor.head_effects(TEXT, ANSWER, **asked)
    np.testing.assert_allclose(again.ablation, kept.ablation, atol=1e-6)
    np.testing.assert_allclose(again.patch, kept.patch, atol=1e-6)
    np.testing.assert_allclose(again.dla, kept.dla, atol=1e-6)
    retraced = extractor.trace(TEXT, ANSWER, CORRUPT, site="attn", versus=VERSUS, method="gradient")
    np.testing.assert_allclose(retraced.effect, traced.effect, atol=1e-6)
