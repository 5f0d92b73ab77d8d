"""Patching between a clean text and its corrupted twin (`heads --corrupt`), a second
answer's logit difference (`--versus`) and the gradient estimates (`--method gradient`),
each held to a reference from plain transformers hooks (tests/hook_references.py, none of
attnviz's code), on tiny random GPT-2, Llama (grouped-query heads) and Gemma 2
(post-attention norms, sliding windows), and Gemma 3 for the estimates (sliding windows
through the fused kernel). The trace command: tests/test_trace.py; attention over a
window: tests/test_windowed.py."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import attnviz
from attnviz.cli import app
from attnviz.inputs import Input
from attnviz.request import Request
from tests.checks import failed_in_process, model_tolerance
from tests.hook_references import (
    ANSWER,
    CORRUPT,
    FAMILIES,
    TEXT,
    VERSUS,
    head_size,
    layers_of,
    metric_with_hooks,
    output_projection,
    prepared,
    recorded_at,
    reference_gradients,
    reference_patch,
    reference_pattern_gradients,
    site_point,
)


@pytest.mark.parametrize(
    ("family", "versus"), [(family, False) for family in FAMILIES] + [("llama-lm", True)]
)
def test_patch_equals_a_hook_restoring_each_heads_clean_output(
    generators, language_models, family, versus
):
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus
    )
    found = extractor.head_statistics(
        TEXT, answer=ANSWER, versus=VERSUS if versus else None, corrupt=CORRUPT
    ).effects
    corrupt, expected = reference_patch(model, clean_ids, corrupt_ids, answer_id, versus_id)
    np.testing.assert_allclose(found.patch, expected, atol=1e-5)
    assert found.on.corrupt_metric == pytest.approx(corrupt, abs=1e-5)
    assert found.on.clean_metric == pytest.approx(
        metric_with_hooks(model, clean_ids, answer_id, versus_id), abs=1e-5
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_versus_makes_the_metric_a_logit_difference(generators, language_models, family):
    """ablation: a hook zeroing each head, measured as logit(answer) − logit(versus); dla
    is linear in the unembedding row, so with --versus it is the answer's less the
    versus answer's."""
    extractor, model, (clean_ids, _), answer_id, versus_id = prepared(
        generators, language_models, family, versus=True
    )
    found = extractor.head_effects(TEXT, ANSWER, versus=VERSUS)
    clean = metric_with_hooks(model, clean_ids, answer_id, versus_id)
    heads = model.config.num_attention_heads
    size = model.config.hidden_size // heads if family == "gpt2-lm" else model.config.head_dim
    for layer in range(len(layers_of(model))):
        for head in range(heads):
            part = slice(head * size, (head + 1) * size)

            def zero(_m, args, kwargs, part=part):
                changed = args[0].clone()
                changed[..., part] = 0
                return (changed, *args[1:]), kwargs

            hooks = [(output_projection(model, layer), "pre", zero)]
            expected = metric_with_hooks(model, clean_ids, answer_id, versus_id, hooks) - clean
            assert found.ablation[layer, head] == pytest.approx(expected, abs=1e-5)
    answer_dla = extractor.head_effects(TEXT, ANSWER).dla
    versus_dla = extractor.head_effects(TEXT, VERSUS).dla
    np.testing.assert_allclose(found.dla, answer_dla - versus_dla, atol=1e-5)
    assert found.on.clean_metric == pytest.approx(clean, abs=1e-5)


@pytest.mark.parametrize("family", [*FAMILIES, "gemma3-lm"])
def test_gradient_estimates_equal_autograd_through_kept_activations(
    generators, language_models, family
):
    """ablation: Σ ∂m/∂z · (0 − z) at the clean run; patch: Σ ∂m/∂z · (z_clean − z) at the
    corrupted run; trace: ∂m/∂a · (a_clean − a) at each position of the corrupted run."""
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus=True
    )
    asking = [parameter.requires_grad for parameter in model.parameters()]
    found = extractor.head_statistics(
        TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT, method="gradient"
    ).effects
    assert [parameter.requires_grad for parameter in model.parameters()] == asking
    at_clean = reference_gradients(model, clean_ids, answer_id, versus_id, "z")
    at_corrupt = reference_gradients(model, corrupt_ids, answer_id, versus_id, "z")
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
    # an output inside the layer, the layer's own, the residual between its blocks (no
    # module's boundary), and a head's queries and values (GQA's fewer heads in Llama)
    for site, by_position in [
        ("mlp", False), ("resid_post", False), ("resid_mid", False), ("q", True), ("v", False)
    ]:  # fmt: skip
        (traced,) = extractor.run(
            [Input(TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT)],
            Request(maps=False, trace=site, method="gradient", by_position=by_position),
        )
        clean_at = recorded_at(model, clean_ids, site)
        corrupt_at = reference_gradients(model, corrupt_ids, answer_id, versus_id, site)
        expected = np.stack(
            [
                _estimated_cells(model, site, layer, (clean - a) * gradient, by_position)
                for layer, (clean, (a, gradient)) in enumerate(
                    zip(clean_at, corrupt_at, strict=True)
                )
            ]
        )
        np.testing.assert_allclose(traced.trace.effect, expected, atol=1e-5)


@pytest.mark.parametrize("family", [*FAMILIES, "gemma3-lm"])
def test_a_patterns_estimate_equals_autograd_through_the_eager_weights(
    generators, language_models, family
):
    """Σ over a head's weights of ∂m/∂A · (A_clean − A) at the corrupted run, the gradient
    read at the eager softmax's output."""
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus=True
    )
    clean = [
        weights
        for weights, _ in reference_pattern_gradients(model, clean_ids, answer_id, versus_id)
    ]
    at_corrupt = reference_pattern_gradients(model, corrupt_ids, answer_id, versus_id)
    for by_position in (False, True):
        (traced,) = extractor.run(
            [Input(TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT)],
            Request(maps=False, trace="pattern", method="gradient", by_position=by_position),
        )
        expected = np.stack(
            [
                ((a_clean - a) * gradient).sum(-1).double().numpy()  # (H, T)
                for a_clean, (a, gradient) in zip(clean, at_corrupt, strict=True)
            ]
        )
        expected = expected if by_position else expected.sum(-1)
        tolerance = model_tolerance(model.config)  # the effects are 1e-4 and less
        assert np.abs(expected).max() > 10 * tolerance
        np.testing.assert_allclose(traced.trace.effect, expected, atol=tolerance)


def _estimated_cells(model, site, layer, product, by_position):
    """Σ of a site's (clean − corrupted) × gradient, (T, W), over each cell: a position's
    width at a layer's site, a head's columns (and positions, unless by position)."""
    columns = site_point(model, site, layer)[2]
    product = product[:, columns].double()
    if site not in ("q", "k", "v", "z"):
        return product.sum(-1).numpy()
    per_head = product.unflatten(-1, (-1, head_size(model))).sum(-1)  # (T, heads)
    return (per_head.T if by_position else per_head.sum(0)).numpy()


def test_gradient_estimates_rank_heads_as_the_exact_sweep_on_a_smooth_change(
    generators, language_models
):
    """Where the change is small (the mean instead of the output: a nearby point), the
    first-order estimate of each head's ablation is close to the exact one."""
    extractor = language_models["llama-lm"]
    exact = extractor.head_effects(TEXT, ANSWER, ablate="mean").ablation
    estimate = extractor.head_effects(TEXT, ANSWER, ablate="mean", method="gradient").ablation
    assert np.corrcoef(exact.ravel(), estimate.ravel())[0, 1] > 0.9


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["heads", TEXT, "--corrupt", CORRUPT], "--corrupt measures what heads do to an answer"),
        (["heads", TEXT, "--versus", VERSUS], "--versus measures what heads do to an answer"),
        (["heads", TEXT, "--answer", ANSWER, "--versus", ANSWER], "--versus is the answer itself"),
        (["heads", TEXT, "--method", "gradient"], "--method says how effects are measured"),
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


@pytest.mark.parametrize("command", ["heads", "trace"])
def test_the_answers_texts_are_read_from_files_as_text_is(runner, generators, tmp_path, command):
    """--corrupt, --versus and --answer read @FILE and @- as TEXT does: the same numbers as
    the texts given as arguments."""
    path = generators["gpt2-lm"]
    files = {"corrupt": CORRUPT, "versus": VERSUS, "answer": ANSWER}
    for name, text in files.items():
        (tmp_path / name).write_text(text + "\n", encoding="utf-8")  # the file's end dropped
    given = [TEXT, "--model", path, "-f", "json"]
    literal = runner.invoke(
        app, [command, *given, "--answer", ANSWER, "--versus", VERSUS, "--corrupt", CORRUPT]
    )
    assert literal.exit_code == 0, literal.stderr
    named = [f"--{name}={'@' + str(tmp_path / name)}" for name in files]
    read = runner.invoke(app, [command, *given, *named])
    assert read.exit_code == 0, read.stderr
    assert read.stdout == literal.stdout
    piped = runner.invoke(
        app,
        [command, *given, "--answer", ANSWER, "--versus", VERSUS, "--corrupt", "@-"],
        input=CORRUPT,
    )
    assert piped.stdout == literal.stdout, piped.stderr


def test_stdin_read_twice_is_refused(runner):
    result = runner.invoke(
        app, ["trace", "-", "--model", "some-model", "--answer", ANSWER, "--corrupt", "@-"]
    )
    failed_in_process(result, 2, "--corrupt @- and TEXT - would both read standard input")


def test_a_text_that_begins_with_at_leaves_stdin_to_an_option(monkeypatch):
    """TEXT @@- is the words "@-", not standard input: --corrupt @- may read it."""
    import io

    import attnviz.inputs
    from attnviz.errors import UsageError
    from attnviz.inputs import read_option_text

    monkeypatch.setattr(attnviz.inputs, "stdin_bytes", lambda: io.BytesIO(b"piped in\n"))
    assert read_option_text("@@x", "--corrupt", "-") == "@x"
    with pytest.raises(UsageError, match="would both read"):
        read_option_text("@-", "--corrupt", "@-")
    assert read_option_text("@-", "--corrupt", "@@-") == "piped in"


def test_a_long_corrupted_text_from_a_file_is_named_with_its_real_length(
    runner, generators, tmp_path
):
    """200 KiB of corrupted text, more than an argument may hold and than the model reads:
    read whole, and called the corrupted text, with its own length, in the warning and
    the error."""
    long_text = tmp_path / "corrupt.txt"
    long_text.write_text("The cat sat on the mat. " * 8534, encoding="utf-8")
    assert long_text.stat().st_size > 200 << 10
    path = generators["gpt2-lm"]
    result = runner.invoke(
        app, ["trace", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", f"@{long_text}"]
    )
    assert result.exit_code == 2 and result.stdout == ""
    warning, error = result.stderr.splitlines()
    counted = re.search(r"the corrupted text has (\d+) tokens; the model reads at most", warning)
    assert counted and int(counted[1]) > 50_000, warning
    assert f"error: the corrupted text is {counted[1]} tokens and the text 6" in error


def test_an_encoder_has_no_answer_to_trace(runner, tiny):
    result = runner.invoke(
        app, ["trace", TEXT, "--model", tiny["bert"], "--answer", ANSWER, "--corrupt", CORRUPT]
    )
    assert result.exit_code == 2 and "a trace reads the next token" in result.stderr


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


def test_running_out_of_memory_in_the_backward_pass_is_said_as_such(
    runner, generators, monkeypatch
):
    """A text too long for the device is not a model without gradients: exit 1, the
    out-of-memory line, not the refusal of --method gradient (exit 2)."""

    def out_of_memory(*_args, **_kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB.")

    monkeypatch.setattr(torch.autograd, "grad", out_of_memory)
    path = generators["llama-lm"]
    result = runner.invoke(
        app, ["heads", TEXT, "--model", path, "--answer", ANSWER, "--method", "gradient"]
    )
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("attnviz: error: out of memory: ")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("keys_at_most", [0, 2048])
def test_a_layer_computed_again_keeps_a_long_attention_and_runs_a_short_one_again(
    language_models, monkeypatch, keys_at_most
):
    """Recomputing a layer in the backward pass recomputes its norms and MLP, and its fused
    attention only where that reads at most _KEYS_RECOMPUTED_AT_MOST keys (a sliding
    window's blocks): a long one (most of a long text's cost) runs once per layer, as
    without, a short one once more in each layer. Its backward runs in every layer but the
    first: below the first layer's heads nothing is read."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from attnviz.pretrained import backward_pass

    class Kernels(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counted: dict[str, int] = {}

        def __torch_dispatch__(self, operation, types, args=(), kwargs=None):
            name = str(operation)
            if "scaled_dot_product" in name:
                self.counted[name] = self.counted.get(name, 0) + 1
            return operation(*args, **(kwargs or {}))

    extractor = language_models["llama-lm"]
    monkeypatch.setattr(backward_pass, "KEPT_FOR_BACKWARD", 0)
    monkeypatch.setattr(
        backward_pass, "_KEYS_RECOMPUTED_AT_MOST", keys_at_most
    )  # TEXT: 2 < T < 2048
    with Kernels() as kernels:
        extractor.head_effects(TEXT, ANSWER, method="gradient")
    layers = extractor.loaded.model.config.num_hidden_layers
    forward = [count for name, count in kernels.counted.items() if "backward" not in name]
    backward = [count for name, count in kernels.counted.items() if "backward" in name]
    again = 0 if keys_at_most == 0 else layers
    assert (forward, backward) == ([layers + again], [layers - 1])


def test_a_recomputed_layer_keeps_long_attention_and_every_attention_off_the_cpu():
    from attnviz.pretrained import backward_pass

    def keys(count, device="cpu"):
        return torch.empty(1, 1, count, 8, device=device)  # (B, K, T, D)

    at_most = backward_pass._KEYS_RECOMPUTED_AT_MOST
    assert backward_pass.attention_kept(keys(at_most + 1))
    assert not backward_pass.attention_kept(keys(at_most))
    assert backward_pass.attention_kept(keys(at_most, "meta"))  # a device that is not the CPU


def test_each_layer_computed_again_first_hands_back_the_heap_the_last_one_freed(
    language_models, monkeypatch
):
    """Before each layer runs, in the forward pass and again in the backward pass, what the
    layers before freed goes back to the system (glibc would keep it, pinned by what each
    layer keeps: at 8,000 tokens 0.64 GiB of SmolLM2's peak)."""
    from attnviz.pretrained import backward_pass

    extractor = language_models["llama-lm"]
    layers = extractor.loaded.model.config.num_hidden_layers
    handed_back = []
    monkeypatch.setattr(backward_pass, "give_back_freed", lambda: handed_back.append(1))
    extractor.head_effects(TEXT, ANSWER, method="gradient")
    assert handed_back == []  # a short text: every layer's activations are kept
    monkeypatch.setattr(backward_pass, "KEPT_FOR_BACKWARD", 0)
    extractor.head_effects(TEXT, ANSWER, method="gradient")
    assert len(handed_back) == 2 * layers


@pytest.mark.parametrize("family", FAMILIES)
def test_the_gradient_estimates_are_the_same_with_each_layer_computed_again(
    generators, language_models, family, monkeypatch
):
    """Past KEPT_FOR_BACKWARD bytes of activations, each layer is recomputed in the backward
    pass (checkpointing): the estimates do not change."""
    from attnviz.pretrained import backward_pass

    extractor = language_models[family]
    one_token = {"input_ids": torch.ones(1, 1, dtype=torch.long)}
    assert (
        backward_pass._kept_for_backward(extractor.loaded.model, one_token) > 0
    )  # so 0 recomputes
    asked = {"versus": VERSUS, "corrupt": CORRUPT, "method": "gradient"}
    kept = extractor.head_effects(TEXT, ANSWER, **asked)
    traced = extractor.trace(TEXT, ANSWER, CORRUPT, site="attn", versus=VERSUS, method="gradient")
    monkeypatch.setattr(backward_pass, "KEPT_FOR_BACKWARD", 0)
    again = extractor.head_effects(TEXT, ANSWER, **asked)
    np.testing.assert_allclose(again.ablation, kept.ablation, atol=1e-6)
    np.testing.assert_allclose(again.patch, kept.patch, atol=1e-6)
    np.testing.assert_allclose(again.dla, kept.dla, atol=1e-6)
    retraced = extractor.trace(TEXT, ANSWER, CORRUPT, site="attn", versus=VERSUS, method="gradient")
    np.testing.assert_allclose(retraced.effect, traced.effect, atol=1e-6)


def test_a_records_last_positions_are_copies_not_views_of_the_whole_text(language_models):
    """What a gradient pass's clean record reads at the last position holds one position's
    numbers, not the (T, D) tensor it was read from (at 8,000 tokens, half a gigabyte over
    30 layers)."""
    from attnviz.pretrained import anatomy, metrics, patching

    extractor = language_models["gemma2-lm"]
    body = anatomy.anatomy_of(extractor.loaded)
    ids = extractor.loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    answer_id = extractor.loaded.tokenizer(ANSWER)["input_ids"][-1]

    def reduce(_layer, z, gradient):
        return (z * gradient).sum((0, 1))

    found = patching.gradients(
        extractor.loaded.model,
        body,
        {"input_ids": ids},
        metrics.Metric(answer_id),
        "z",
        reduce,
        record=True,
    )
    clean = found.clean
    assert clean is not None
    last = [*clean.written, clean.residual, clean.normed]
    last += [part for pair in clean.post_normed if pair is not None for part in pair]
    assert len(last) == 3 * len(body.blocks) + 2  # gemma 2: post norms too
    for tensor in last:
        assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
        assert tensor.numel() == tensor.shape[-1]  # one position
    # Nor does it hold the layers' whole outputs, which only the exact sweeps start from:
    # with --corrupt they would wait through the corrupted run's passes.
    assert clean.block_outputs == [None] * len(body.blocks)
