"""Activations by name (attnviz/activations.py, pretrained/activations.py): every site read
equals a plain transformers hook's tensor, every edit equals the same edit by a plain hook,
and no hook outlives a call, on the tiny language models of every family."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.cli import app
from attnviz.errors import UsageError
from attnviz.inputs import Input
from tests.checks import failed_in_process
from tests.hook_references import (
    ANSWER,
    CORRUPT,
    TEXT,
    VERSUS,
    answer_token_id,
    eager_weights,
    head_size,
    hidden_of,
    layers_of,
    metric_with_hooks,
    output_projection,
    patterns_of,
    recorded_at,
    recorded_by,
    restorer,
    site_module,
    site_point,
    token_ids,
)

FAMILIES = ["gpt2-lm", "llama-lm", "gemma2-lm", "gemma3-lm"]
LAYER_SITES = ["resid", "attn", "resid_mid", "mlp", "resid_post", "q", "k", "v", "z"]


@pytest.fixture(params=FAMILIES)
def family(request, language_models, generators):
    extractor = language_models[request.param]
    return extractor, extractor.loaded.model, generators[request.param]


def _hooks_left(model):
    return sum(
        len(module._forward_hooks) + len(module._forward_pre_hooks) for module in model.modules()
    )


def test_every_layer_site_is_the_tensor_a_plain_hook_reads(family):
    extractor, model, path = family
    ids = token_ids(path, TEXT)
    found = extractor.activations(TEXT, LAYER_SITES)
    size = head_size(model)
    for site in LAYER_SITES:
        reference = recorded_at(model, ids, site)
        assert len(reference) == model.config.num_hidden_layers
        for layer, tensor in enumerate(reference):
            expected = tensor[:, site_point(model, site, layer)[2]]
            got = found[f"{site}@{layer}"]
            if site in ("q", "k", "v", "z"):
                assert got.shape == (ids.shape[1], expected.shape[1] // size, size)
            assert torch.equal(got.reshape(expected.shape), expected), (site, layer)


def test_graph_nodes_positions_logits_and_patterns_read_as_named(family):
    extractor, model, path = family
    ids = token_ids(path, TEXT)
    names = ["a1.h1", "m0", "input", "logits", "pattern@-1", "resid_post@0"]
    found = extractor.activations(TEXT, names, positions="1,-1")
    last = ids.shape[1] - 1
    z = recorded_at(model, ids, "z")[1]
    size = head_size(model)
    assert torch.equal(found["a1.h1"], z[[1, last], size : 2 * size])
    # the graph's MLP node: what the residual stream is given (after Gemma's post norm)
    block = layers_of(model)[0]
    written = getattr(block, "post_feedforward_layernorm", None) or block.mlp
    (m0,) = recorded_by(model, {"input_ids": ids}, [(written, "post")])
    assert torch.equal(found["m0"], m0[[1, last]])
    assert torch.equal(found["input"], recorded_at(model, ids, "resid")[0][[1, last]])
    assert torch.equal(found["resid_post@0"], recorded_at(model, ids, "resid_post")[0][[1, last]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    torch.testing.assert_close(found["logits"], logits[[1, last]], rtol=0, atol=1e-5)
    torch.testing.assert_close(found.logits, logits[last], rtol=0, atol=1e-5)
    pattern = patterns_of(model, ids)[-1]  # (H, T, S): an eager run's
    torch.testing.assert_close(found["pattern@-1"], pattern[:, [1, last]], rtol=0, atol=1e-6)
    assert found.positions == (1, last) and len(found.tokens) == ids.shape[1]
    assert list(found) == names and found.metric is None
    assert repr(found).startswith(f"Activations({extractor.name}, {ids.shape[1]} tokens, 2 ")
    assert "a1.h1 (2, " in repr(found) and "tensor" not in repr(found)


def test_an_answer_is_measured_in_the_run(family):
    extractor, model, path = family
    ids = token_ids(path, TEXT)
    answer, versus = answer_token_id(path, TEXT, ANSWER), answer_token_id(path, TEXT, VERSUS)
    found = extractor.activations(TEXT, answer=ANSWER, versus=VERSUS)
    assert found.metric == pytest.approx(metric_with_hooks(model, ids, answer, versus), abs=1e-5)
    assert len(found) == 0


def test_edits_equal_the_same_edits_by_plain_hooks(family):
    extractor, model, path = family
    ids, corrupt_ids = token_ids(path, TEXT), token_ids(path, CORRUPT)
    answer, versus = answer_token_id(path, TEXT, ANSWER), answer_token_id(path, TEXT, VERSUS)
    size = head_size(model)
    steer = torch.linspace(-1, 1, model.config.hidden_size)
    corrupted_z = recorded_at(model, corrupt_ids, "z")[0]
    mid_module, mid_kind, _ = site_point(model, "resid_mid", 1)

    def steered(_module, args, kwargs):  # the MLP norm's input, written in place
        (args[0] if args else kwargs["hidden_states"])[0] += steer

    everywhere = slice(None)
    head_zeroed = restorer("pre", everywhere, slice(size, 2 * size), 0.0)
    patched = restorer("pre", everywhere, everywhere, corrupted_z)
    cases = [  # (edits, the plain hooks doing the same)
        ({"a0.h1": "zero"}, [(output_projection(model, 0), *head_zeroed)]),
        ({"resid_mid@1": lambda value: value + steer}, [(mid_module, "pre", steered)]),
        ({"z@0": "patch"}, [(output_projection(model, 0), *patched)]),
    ]
    assert mid_kind == "in place"
    unedited = metric_with_hooks(model, ids, answer, versus)
    for edits, hooks in cases:
        found = extractor.activations(
            TEXT, edits=edits, answer=ANSWER, versus=VERSUS, patch_from=CORRUPT
        )
        expected = metric_with_hooks(model, ids, answer, versus, hooks)
        assert abs(expected - unedited) > 1e-4, edits  # the edit changes the run
        assert found.metric == pytest.approx(expected, abs=1e-5), edits
        assert found.edited == tuple(edits)


def test_a_mean_edit_and_what_the_edited_run_reads_downstream(family):
    extractor, model, path = family
    ids = token_ids(path, TEXT)
    module = site_module(model, "mlp", 0)

    def mean_out(_module, _args, output):
        return output.mean(1, keepdim=True).expand_as(output)

    found = extractor.activations(TEXT, ["mlp@0", "resid_post@1"], edits={"mlp@0": "mean"})
    kept = {}

    def keep(_module, _args, output):
        kept["out"] = (output[0] if isinstance(output, tuple) else output)[0].clone()

    block = site_module(model, "resid_post", 1)
    handles = [module.register_forward_hook(mean_out), block.register_forward_hook(keep)]
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for handle in handles:
            handle.remove()
    mean = recorded_at(model, ids, "mlp")[0].mean(0, keepdim=True)
    torch.testing.assert_close(found["mlp@0"], mean.expand(ids.shape[1], -1), rtol=0, atol=1e-6)
    torch.testing.assert_close(found["resid_post@1"], kept["out"], rtol=0, atol=1e-5)


def test_a_pattern_edit_equals_an_eager_run_with_those_weights(family):
    extractor, model, path = family
    ids = token_ids(path, TEXT)
    answer = answer_token_id(path, TEXT, ANSWER)

    def flattened(weights):  # (H, T, S): every query reads the first key alone
        first = torch.zeros_like(weights)
        first[..., 0] = 1.0
        return first

    found = extractor.activations(
        TEXT, ["pattern@0"], edits={"pattern@0": flattened}, answer=ANSWER
    )
    with eager_weights(model, lambda layer, w: flattened(w[0])[None] if layer == 0 else w):
        expected = metric_with_hooks(model, ids, answer, None)
    assert expected != pytest.approx(metric_with_hooks(model, ids, answer, None), abs=1e-4)
    assert found.metric == pytest.approx(expected, abs=1e-5)
    torch.testing.assert_close(found["pattern@0"], flattened(patterns_of(model, ids)[0]))


def test_saved_activations_are_the_arrays(tmp_path, family):
    extractor, _, _ = family
    found = extractor.activations(TEXT, ["resid_post@0", "a0.h0"], positions="last")
    path = tmp_path / "acts.npz"
    found.save(str(path))
    saved = np.load(path)
    for name, tensor in found.items():
        np.testing.assert_array_equal(saved[name], tensor.float().numpy())
    assert list(saved["tokens"]) == list(found.tokens)
    assert list(saved["positions"]) == [len(found.tokens) - 1]


def _wrong_shape(value):
    return value[:-1]  # a position short


def _not_finite(value):
    return value * float("nan")


def _interrupted(value):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("names", "edits", "said"),
    [
        (["resid_pre"], None, "no site is named 'resid_pre': name one of resid, attn"),
        (["z@9"], None, "layer 9 is out of range"),
        (["a0.h9"], None, "head 9 is out of range"),
        (["logits"], {"logits": "zero"}, "the logits are read, not edited"),
        ([], {"z@0": "shuffle"}, "unknown edit of z@0 'shuffle': choose one of zero, mean, patch"),
        ([], {"z@0": 3}, "the edit of z@0 is int"),
        ([], {"z@0": torch.zeros(2, 2)}, "the edit of z@0 is (2, 2): the site holds"),
        ([], {"z@0": torch.zeros(1, dtype=torch.long)}, "it must be a float tensor"),
        ([], {"resid@1": _wrong_shape}, "the edit of resid@1 gave ("),
        ([], {"resid@1": _not_finite}, "gave NaN or infinity"),
        ([], {"z@0": "patch"}, "give patch_from (--corrupt)"),
    ],
)
@pytest.mark.parametrize("family_name", ["gpt2-lm", "llama-lm"])  # fused and grouped heads
def test_bad_names_and_edits_are_refused_and_leave_no_hook(
    language_models, generators, family_name, names, edits, said
):
    extractor, path = language_models[family_name], generators[family_name]
    model = extractor.loaded.model
    with pytest.raises(UsageError) as refused:
        extractor.activations(TEXT, names, edits=edits)
    assert said in str(refused.value)
    assert _hooks_left(model) == 0
    after = extractor.activations(TEXT, ["resid_post", "logits"])
    fresh = attnviz.load(path).activations(TEXT, ["resid_post", "logits"])
    assert all(torch.equal(after[name], fresh[name]) for name in fresh)


def test_an_interrupt_inside_an_edit_leaves_no_hook(family):
    extractor, model, _ = family
    with pytest.raises(KeyboardInterrupt):
        extractor.activations(TEXT, ["pattern@0"], edits={"pattern@0": _interrupted})
    with pytest.raises(KeyboardInterrupt):
        extractor.activations(TEXT, edits={"resid_mid@0": _interrupted})
    assert _hooks_left(model) == 0
    assert model.config._attn_implementation != "attnviz_activations"


def test_a_position_past_the_text_and_the_builtin_stack_are_refused(language_models):
    with pytest.raises(UsageError, match="out of range"):
        language_models["llama-lm"].activations(TEXT, ["resid@0"], positions="99")
    with pytest.raises(UsageError, match="names no sites: activations are read of a pretr"):
        attnviz.load().activations(TEXT, ["resid@0"])
    with pytest.raises(UsageError, match="edits change a run that reads activations"):
        attnviz.Request(edits={"z@0": "zero"})


def test_acts_writes_what_the_library_reads(runner, generators, language_models, tmp_path):
    model = generators["llama-lm"]
    extractor = language_models["llama-lm"]
    names = ["resid_post@1", "a0.h1", "pattern@0"]
    arguments = ["acts", TEXT, "--model", model, "--rows", "last", "--answer", ANSWER]
    arguments += [part for name in names for part in ("--site", name)] + ["--edit", "m0=zero"]
    expected = extractor.activations(
        TEXT, names, positions="last", answer=ANSWER, edits={"m0": "zero"}
    )
    saved = tmp_path / "acts.npz"
    wrote = runner.invoke(app, [*arguments, "-f", "npz", "-o", str(saved)])
    assert wrote.exit_code == 0, wrote.stderr
    arrays = np.load(saved)
    for name in names:
        np.testing.assert_array_equal(arrays[name], expected[name].float().numpy())
    document = runner.invoke(app, [*arguments, "-f", "json"])
    assert document.exit_code == 0, document.stderr
    read = json.loads(document.stdout)
    assert read["edited"] == ["m0"] and read["metric"] == pytest.approx(expected.metric)
    assert read["activations"]["a0.h1"]["values"] == expected["a0.h1"].tolist()
    table = runner.invoke(app, arguments)
    assert table.exit_code == 0, table.stderr
    assert all(name in table.stdout for name in names) and "metric" in table.stdout


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--site", "resid_pre"], "no site is named 'resid_pre'"),
        (["--site", "z", "--edit", "z@0"], "--edit 'z@0': give NAME=EDIT"),
        (["--site", "z", "--edit", "z@0=swap"], "unknown edit of z@0 'swap'"),
        ([], "name a site to read with --site"),
        (["--site", "z", "-o", "acts.txt"], "-o takes -f json or npz"),
    ],
)
def test_acts_refuses_bad_input_in_one_line(
    runner, generators, arguments, said, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["acts", TEXT, "--model", generators["llama-lm"], *arguments])
    failed_in_process(result, 2, said)
    assert list(Path().iterdir()) == []


def test_acts_on_the_builtin_stack_is_refused(runner):
    failed_in_process(
        runner.invoke(app, ["acts", TEXT, "--site", "resid"]), 2, "builtin names no sites"
    )


def test_a_users_restore_is_the_traces(family):
    """trace restores the clean residual at one layer and position of the corrupted run
    through the same editing as a user's edit: the two give one number."""
    extractor, _, _ = family
    traced = extractor.trace(TEXT, ANSWER, CORRUPT, versus=VERSUS)
    clean = extractor.activations(TEXT, ["resid"])
    corrupted = extractor.activations(CORRUPT, answer=ANSWER, versus=VERSUS).metric
    checked = 0
    for index, layer in enumerate(traced.layers):
        for position in range(len(traced.tokens)):
            value = clean[f"resid@{layer}"][position]

            def restore(own, value=value, position=position):
                own[position] = value
                return own

            edits = {f"resid@{layer}": restore}
            run = extractor.activations(CORRUPT, edits=edits, answer=ANSWER, versus=VERSUS)
            assert run.metric - corrupted == pytest.approx(
                float(traced.effect[index, position]), abs=1e-5
            )
            checked += abs(traced.effect[index, position]) > 1e-3
    assert checked  # some restores bring the answer back


def test_a_long_texts_pass_gives_the_freed_pages_back_at_each_layer(family, monkeypatch):
    """glibc keeps freed blocks under 32 MiB in its heap, and a tensor kept per layer pins
    them: at 8,000 tokens every layer's residual read at the last position held 400 MiB
    more than the model's own pass (benchmarks/activations.py) until each layer gave the
    freed pages back."""
    from attnviz.pretrained import sites

    extractor, model, _ = family
    given_back = []
    monkeypatch.setattr(sites, "_GIVEN_BACK_FROM", 0)  # every text counts as long
    monkeypatch.setattr(sites, "give_back_freed", lambda: given_back.append(True))
    extractor.activations(TEXT, ["resid_post"], positions="last")
    assert len(given_back) == model.config.num_hidden_layers


def test_a_patch_needs_no_answer_and_equals_a_plain_hooks(family):
    """patch_from alone: the corrupted run's z at layer 0 put into the clean run, read
    downstream, as a plain pre-hook of the output projection puts it."""
    extractor, model, path = family
    ids, corrupt_ids = token_ids(path, TEXT), token_ids(path, CORRUPT)
    found = extractor.activations(
        TEXT, ["resid_post@-1"], edits={"z@0": "patch"}, patch_from=CORRUPT
    )
    assert found.metric is None
    (corrupt_z,) = recorded_by(
        model, {"input_ids": corrupt_ids}, [(output_projection(model, 0), "pre")]
    )

    def patch(_module, args, kwargs):
        hidden = hidden_of(args, kwargs).clone()
        hidden[0] = corrupt_z
        return (
            ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})
        )

    handle = output_projection(model, 0).register_forward_pre_hook(patch, with_kwargs=True)
    try:
        last = site_module(model, "resid_post", len(layers_of(model)) - 1)
        (expected,) = recorded_by(model, {"input_ids": ids}, [(last, "post")])
    finally:
        handle.remove()
    assert torch.equal(found["resid_post@-1"], expected)
    assert not torch.equal(
        expected, extractor.activations(TEXT, ["resid_post@-1"])["resid_post@-1"]
    )
    with pytest.raises(UsageError, match="--corrupt measures what heads do to an answer"):
        list(extractor.run([Input(TEXT, corrupt=CORRUPT)]))  # maps read no twin
