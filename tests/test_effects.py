"""What heads do to an answer: each effect against an independent few-line reference.

The references reach into the model's own modules, found by what they are (GPT-2's
c_proj, Llama's o_proj; a LayerNorm or an RMS norm and its gain) and rerun the whole
model per head; attnviz finds the modules itself, batches heads and starts its passes
above the clean one. Families: GPT-2 (LayerNorm,
Conv1D projections), Llama (RMSNorm, grouped-query heads), Gemma 2 (the attention's
output normed before the residual, gains of 1 + weight, sliding-window layers).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnviz
from attnviz.errors import UsageError
from tests import hook_references as twins
from tests.checks import model_tolerance
from tests.hook_references import final_norm, log_prob, reference_ablation, reference_dla

TEXT = "The man walked the dog because"
ANSWER = " it"
FAMILIES = ["gpt2-lm", "llama-lm", "gemma2-lm"]


def _loaded(generators, family, dtype="auto"):
    """The model, its final norm's gain and shift made random (a fresh model's are 1 and
    0, which would hide a norm read the wrong way)."""
    options = attnviz.LoadOptions(dtype=dtype)
    extractor = attnviz.load(generators[family], load_options=options)
    model = extractor.loaded.model
    norms = [final_norm(model)]
    if family == "gemma2-lm":
        norms += [layer.post_attention_layernorm for layer in model.model.layers]
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for norm in norms:
            norm.weight.copy_(torch.rand(norm.weight.shape, generator=generator) + 0.5)
            if getattr(norm, "bias", None) is not None:
                norm.bias.copy_(torch.randn(norm.bias.shape, generator=generator))
    return extractor, model


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("ablate", ["zero", "mean"])
def test_ablation_equals_a_hook_rerunning_the_model_per_head(generators, family, ablate):
    extractor, model = _loaded(generators, family)
    effects = extractor.head_effects(TEXT, ANSWER, ablate=ablate)
    ids = extractor.loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    answer_id = extractor.loaded.tokenizer(TEXT + ANSWER)["input_ids"][ids.shape[1]]
    assert effects.answer_token == extractor.loaded.tokenizer.decode([answer_id])
    assert effects.log_prob == pytest.approx(log_prob(model, ids, answer_id), abs=1e-5)
    expected = reference_ablation(
        model, ids, answer_id, effects.layers, effects.heads, mean=ablate == "mean"
    )
    assert np.abs(expected).max() > 1e-3  # the heads do change the answer
    np.testing.assert_allclose(effects.ablation, expected, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_dla_equals_the_heads_writing_read_through_the_frozen_norm(generators, family):
    extractor, model = _loaded(generators, family)
    effects = extractor.head_effects(TEXT, ANSWER)
    ids = extractor.loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    answer_id = extractor.loaded.tokenizer(TEXT + ANSWER)["input_ids"][ids.shape[1]]
    expected = reference_dla(model, ids, answer_id, effects.layers, effects.heads)
    assert np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(effects.dla, expected, atol=1e-4)


@pytest.mark.parametrize("family", ["llama-lm", "gemma2-lm"])
def test_dla_in_bfloat16_is_the_float32_dla_to_its_precision(generators, family):
    """The norms' outputs are rounded to bfloat16 (8 bits), and are still read as norms."""
    expected = _loaded(generators, family)[0].head_effects(TEXT, ANSWER).dla
    halved = _loaded(generators, family, "bfloat16")[0].head_effects(TEXT, ANSWER).dla
    np.testing.assert_allclose(halved, expected, atol=0.05 * np.abs(expected).max())


@pytest.mark.parametrize("method", ["exact", "gradient"])
def test_chosen_layers_and_heads_are_those_of_the_whole_sweep(generators, method):
    extractor = attnviz.load(generators["llama-lm"])
    asked = {"corrupt": twins.CORRUPT, "method": method}
    whole = extractor.head_effects(twins.TEXT, twins.ANSWER, **asked)
    some = extractor.head_effects(twins.TEXT, twins.ANSWER, layers=1, heads=[0, 3], **asked)
    assert (some.layers, some.heads) == ([1], [0, 3])
    for column in ("ablation", "dla", "patch"):
        chosen = getattr(whole, column)[1:, [0, 3]]
        np.testing.assert_allclose(getattr(some, column), chosen, atol=1e-6)


def test_passes_of_one_row_give_the_same_effects(generators, monkeypatch):
    """Heads batched several per pass, or one per pass: batch rows do not mix."""
    from attnviz.pretrained import effects as module

    extractor = attnviz.load(generators["gpt2-lm"])
    batched = extractor.head_effects(TEXT, ANSWER)
    monkeypatch.setattr(module, "_ROWS_PER_PASS", 1)
    single = extractor.head_effects(TEXT, ANSWER)
    np.testing.assert_allclose(batched.ablation, single.ablation, atol=1e-5)


@pytest.mark.parametrize(
    ("model", "answer", "message"),
    [
        ("builtin", " it", "needs a causal language model"),
        ("bert", " it", "is an encoder model"),
        ("gpt2", " it", "a decoder without its language-model head"),
        ("gpt2-lm", "   ", "the answer is empty"),
    ],
)
def test_what_has_no_answer_is_refused(generators, tiny, model, answer, message):
    extractor = attnviz.load({**tiny, **generators}.get(model, model))
    with pytest.raises(UsageError, match=message):
        extractor.head_effects(TEXT, answer)


def test_passes_above_the_first_layer_do_not_run_the_layers_below(generators, monkeypatch):
    """One head per pass: layer 0's attention runs in the clean pass and in the passes that
    ablate layer 0's heads, never in those that ablate a higher layer's."""
    from attnviz.pretrained import effects as module

    extractor = attnviz.load(generators["gpt2-lm"])
    monkeypatch.setattr(module, "_ROWS_PER_PASS", 1)
    calls = []
    first = extractor.loaded.model.transformer.h[0].attn
    handle = first.register_forward_hook(lambda *_: calls.append(1))
    try:
        effects = extractor.head_effects(TEXT, ANSWER)
    finally:
        handle.remove()
    assert len(calls) == 1 + len(effects.heads)


def test_a_model_whose_layers_cannot_be_skipped_is_run_whole(generators, monkeypatch):
    """The first pass that starts above the clean one carries a row ablating nothing: where
    it does not give the clean log-probability, every pass runs the whole model."""
    from attnviz.pretrained import effects as module

    extractor = attnviz.load(generators["llama-lm"])
    expected = extractor.head_effects(TEXT, ANSWER)
    monkeypatch.setattr(module, "_ROWS_PER_PASS", 2)
    monkeypatch.setattr(module, "_expanded", lambda output, batch: output.expand(batch, -1, -1) * 0)
    effects = extractor.head_effects(TEXT, ANSWER)
    np.testing.assert_allclose(effects.ablation, expected.ablation, atol=1e-5)


def test_heads_answer_lists_the_effects_sorted_by_ablation(runner, generators):
    from attnviz.cli import app

    model = generators["llama-lm"]
    arguments = ["heads", "--model", model, TEXT, "--answer", ANSWER]
    data = runner.invoke(app, [*arguments, "-f", "json"])
    assert data.exit_code == 0, data.stderr
    document = json.loads(data.stdout)
    expected = attnviz.load(model).head_effects(TEXT, ANSWER)
    assert document["answer_log_prob"] == pytest.approx(expected.log_prob)
    assert (document["answer"], document["ablate"]) == (ANSWER, "zero")
    rows = document["heads"]
    assert [row["ablation"] for row in rows] == sorted(row["ablation"] for row in rows)
    for row in rows:
        effect = expected.of(row["layer"], row["head"])
        assert (row["ablation"], row["dla"]) == pytest.approx((effect["ablation"], effect["dla"]))
        assert row["entropy"] is not None  # the statistics beside them
    table = runner.invoke(app, [*arguments, "--sort", "dla", "--top", "2"])
    assert table.exit_code == 0, table.stderr
    assert "ablation" in table.stdout and "dla" in table.stdout and "previous" not in table.stdout
    assert f"answer {expected.answer_token!r}" in table.stdout
    listed = [line.split()[:2] for line in table.stdout.splitlines() if line[:5].strip().isdigit()]
    best = sorted(rows, key=lambda row: -row["dla"])[:2]
    assert listed == [[str(row["layer"]), str(row["head"])] for row in best]
    plain = runner.invoke(app, ["heads", "--model", model, TEXT, "-f", "csv"])
    assert "ablation" not in plain.stdout  # no answer, no effect columns


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--answer", " x"], "builtin has no next token to read"),
        (["--answer", " "], "the answer is empty"),
        (["--ablate", "mean"], "--ablate applies to --answer, not statistics alone"),
        (["--sort", "ablation"], "--sort ablation ranks heads by their effect on an answer"),
        (["--answer", " x", "--ablate", "half"], "'half' is not one of"),
    ],
)
def test_heads_answer_usage_errors_before_a_model_loads(runner, arguments, message):
    from attnviz.cli import app

    result = runner.invoke(app, ["heads", "Hello there", *arguments])
    assert result.exit_code == 2
    assert message in result.stderr and result.stdout == ""
    assert "Traceback" not in result.stderr


def test_heads_answer_of_saved_maps_or_the_probe_is_refused(runner, generators, tiny, tmp_path):
    from attnviz.cli import app

    model = generators["gpt2-lm"]
    saved = tmp_path / "maps.json"
    assert runner.invoke(app, ["show", "--model", model, TEXT, "-o", str(saved)]).exit_code == 0
    from_saved = runner.invoke(app, ["heads", "--from", str(saved), "--answer", ANSWER])
    assert from_saved.exit_code == 2  # it said the built-in stack has no unembedding
    assert from_saved.stderr == (
        "attnviz: error: --answer applies to a model run on TEXT, not saved maps (--from): "
        "leave it out\n"
    )
    probe = runner.invoke(
        app, ["heads", "--model", model, "--detect", "induction", "--answer", ANSWER]
    )
    assert probe.exit_code == 2 and "the detectors' probe" in probe.stderr
    encoder = runner.invoke(app, ["heads", "--model", tiny["bert"], TEXT, "--answer", ANSWER])
    assert encoder.exit_code == 2 and "is an encoder model" in encoder.stderr


def _knocked_by_hand(model, ids, answer_id, rows, span):
    """Every layer: the model given a whole causal mask with the span hidden from the rows."""
    tokens = ids.shape[1]
    mask = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    mask[np.ix_(rows, span)] = False
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask[None, None]).logits[0, -1]
    return float(logits.float().log_softmax(-1)[answer_id])


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm"])
def test_knockout_of_every_layer_equals_the_mask_made_by_hand(generators, family):
    extractor = attnviz.load(generators[family])
    model, tokenizer = extractor.loaded.model, extractor.loaded.tokenizer
    layers = model.config.num_hidden_layers
    ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
    answer_id = tokenizer(TEXT + ANSWER)["input_ids"][ids.shape[1]]
    last = ids.shape[1] - 1
    found = extractor.knockout(TEXT, ANSWER, rows="last", span="dog", layers=0, window=2 * layers)
    assert found.rows == [last] and found.windows == [(0, layers - 1)]
    (dog,) = found.span  # the text's "dog", one token here
    expected = _knocked_by_hand(model, ids, answer_id, [last], [dog]) - found.log_prob
    assert abs(expected) > 1e-4  # the block changes the answer
    assert found.change[0] == pytest.approx(expected, abs=1e-5)
    several = extractor.knockout(TEXT, ANSWER, rows=[last - 1, last], span="0-2", window=99)
    expected = _knocked_by_hand(model, ids, answer_id, [last - 1, last], [0, 1, 2])
    assert several.change == pytest.approx(expected - several.log_prob, abs=1e-5)


def _sliding_masks(config, tokens: int, rows: list[int], span: list[int]) -> dict:
    """Gemma 2's two masks written out (global: causal; sliding: the last ``sliding_window``
    keys), additive, each with the span hidden from the rows: given as a dict, the model
    uses them as they are."""
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    distance = torch.arange(tokens)[:, None] - torch.arange(tokens)[None, :]
    masks = {}
    for kind, allowed in (
        ("full_attention", causal),
        ("sliding_attention", causal & (distance < config.sliding_window)),
    ):
        allowed = allowed.clone()
        allowed[np.ix_(rows, span)] = False
        hidden = torch.zeros(tokens, tokens).masked_fill(~allowed, torch.finfo(torch.float32).min)
        masks[kind] = hidden[None, None]
    return masks


def test_knockout_in_sliding_window_layers_equals_their_masks_made_by_hand(generators):
    extractor = attnviz.load(generators["gemma2-lm"])
    model, tokenizer = extractor.loaded.model, extractor.loaded.tokenizer
    assert set(model.config.layer_types) == {"sliding_attention", "full_attention"}
    ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
    answer_id = tokenizer(TEXT + ANSWER)["input_ids"][ids.shape[1]]
    tokens, every = ids.shape[1], 2 * model.config.num_hidden_layers

    def by_hand(rows, span):
        with torch.inference_mode():
            masks = _sliding_masks(model.config, tokens, rows, span)
            logits = model(input_ids=ids, attention_mask=masks).logits[0, -1]
        return float(logits.float().log_softmax(-1)[answer_id])

    clean = extractor.knockout(TEXT, ANSWER, rows="last", span="dog", layers=0, window=every)
    assert by_hand([], []) == pytest.approx(clean.log_prob, abs=1e-5)  # the masks are the model's
    # "dog" is inside the last row's sliding window; token 1 only global layers can see.
    for span in ("dog", "1"):
        found = extractor.knockout(TEXT, ANSWER, rows="last", span=span, layers=0, window=every)
        expected = by_hand([tokens - 1], found.span) - found.log_prob
        assert abs(expected) > 1e-4
        assert found.change[0] == pytest.approx(expected, abs=1e-5)


def test_knockout_windows_are_the_layers_around_each_one(generators, monkeypatch):
    """One layer's window changes only that layer: knocking out every layer one at a time
    (batched, passes starting above the clean one) equals doing it a pass per layer."""
    from attnviz.pretrained import effects as module

    extractor = attnviz.load(generators["gpt2-lm"])
    found = extractor.knockout(TEXT, ANSWER, rows="last", span="1-3")
    assert found.layers == [0, 1, 2] and found.windows == [(0, 0), (1, 1), (2, 2)]
    wide = extractor.knockout(TEXT, ANSWER, rows="last", span="1-3", window=2)
    assert wide.windows == [(0, 1), (1, 2), (2, 2)]
    monkeypatch.setattr(module, "_ROWS_PER_PASS", 1)
    single = extractor.knockout(TEXT, ANSWER, rows="last", span="1-3")
    np.testing.assert_allclose(found.change, single.change, atol=1e-6)


@pytest.mark.parametrize(
    ("rows", "span", "window", "message"),
    [
        ("0", "0", 1, "leaves query row 0 no key to read"),
        ("last", "99", 1, "out of range"),
        ("last", "walrus", 1, "walrus"),
        ("last", "0", 0, "--window is a number of layers, at least 1"),
    ],
)
def test_knockout_bad_rows_spans_and_windows(generators, rows, span, window, message):
    extractor = attnviz.load(generators["gpt2-lm"])
    with pytest.raises(UsageError, match=message):
        extractor.knockout(TEXT, ANSWER, rows=rows, span=span, window=window)


def test_heads_knockout_lists_layers_largest_drop_first(runner, generators):
    from attnviz.cli import app

    model = generators["gpt2-lm"]
    arguments = ["heads", "--model", model, TEXT, "--answer", ANSWER, "--knockout", "last:1-3"]
    data = runner.invoke(app, [*arguments, "--window", "2", "-f", "json"])
    assert data.exit_code == 0, data.stderr
    document = json.loads(data.stdout)
    expected = attnviz.load(model).knockout(TEXT, ANSWER, rows="last", span="1-3", window=2)
    assert document["knockout_span"] == [1, 2, 3] and document["window"] == 2
    rows = document["layers"]
    assert [row["knockout"] for row in rows] == sorted(row["knockout"] for row in rows)
    by_layer = sorted(rows, key=lambda row: row["layer"])
    windows = [
        (layer, *window) for layer, window in zip(expected.layers, expected.windows, strict=True)
    ]
    assert [(row["layer"], row["first"], row["last"]) for row in by_layer] == windows
    assert [row["knockout"] for row in by_layer] == pytest.approx(expected.change.tolist())
    table = runner.invoke(app, [*arguments, "--sort", "layer"])
    assert table.exit_code == 0, table.stderr
    listed = [line.split()[0] for line in table.stdout.splitlines() if line[:5].strip().isdigit()]
    assert listed == ["0", "1", "2"] and "may not read keys 1–3" in table.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--knockout", "last:0"], "--knockout applies to --answer"),
        (["--answer", " x", "--knockout", "last"], "--knockout takes ROWS:SPAN"),
        (["--answer", " x", "--window", "3"], "--window applies to --knockout"),
        (["--answer", " x", "--knockout", "last:0", "--ablate", "mean"], "not a knockout"),
    ],
)
def test_heads_knockout_usage_errors(runner, arguments, message):
    from attnviz.cli import app

    result = runner.invoke(app, ["heads", "--model", "nowhere", "Hello there", *arguments])
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""


def test_top_heads_by_an_effect_draw_the_heads_the_answer_needs(runner, generators, tmp_path):
    from attnviz.cli import app

    model = generators["llama-lm"]
    effects = attnviz.load(model).head_effects(TEXT, ANSWER)
    places = [(layer, head) for layer in effects.layers for head in effects.heads]
    for by, best in (
        ("ablation", sorted(places, key=lambda place: effects.of(*place)["ablation"])),
        ("dla", sorted(places, key=lambda place: -effects.of(*place)["dla"])),
    ):
        arguments = [model, TEXT, "--answer", ANSWER, "--top-heads", "2", "--by", by]
        shown = runner.invoke(app, ["show", "--model", *arguments], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.stderr
        titles = [f"layer {layer} · head {head} · {by}" for layer, head in best[:2]]
        assert all(title in shown.stdout for title in titles), (titles, shown.stdout)
        assert shown.stdout.count(f" · {by} ") == 2
    picture = tmp_path / "top.png"
    exported = runner.invoke(app, ["export", "--model", *arguments, "-o", str(picture)])
    assert exported.exit_code == 0, exported.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("command", "arguments", "message"),
    [
        (["show"], ["--top-heads", "2", "--by", "ablation"], "--by ablation ranks heads by"),
        (["export", "-o", "x.png"], ["--top-heads", "2", "--by", "dla"], "give --answer"),
        (["show"], ["--answer", " x"], "--answer ranks the heads a picture draws"),
        (["show"], ["--answer", " x", "--top-heads", "2", "--by", "sink"], "--top-heads N"),
    ],
)
def test_ranking_by_an_effect_needs_an_answer_and_heads(runner, command, arguments, message):
    from attnviz.cli import app

    text = "-" if command[0] == "batch" else "Hello there"
    result = runner.invoke(app, [command[0], "--model", "nowhere", text, *command[1:], *arguments])
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""


def test_batch_draws_the_heads_each_inputs_answer_needs(runner, generators, tmp_path):
    from attnviz.cli import app

    model = generators["gpt2-lm"]
    lines = [
        {"text": TEXT, "answer": ANSWER, "id": "dog"},
        {"text": "the cat sat on the", "answer": " mat", "id": "cat"},
        {"text": "no answer here", "id": "none"},
    ]
    source = tmp_path / "answers.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    arguments = ["--top-heads", "2", "--by", "ablation", "-f", "png", "--view", "head"]
    result = runner.invoke(
        app, ["batch", str(source), "--model", model, "-o", str(out), *arguments]
    )
    assert result.exit_code == 3  # the input without an answer fails, the others are written
    extractor = attnviz.load(model)
    for line in lines[:2]:
        effects = extractor.head_effects(line["text"], line["answer"])
        places = [(layer, head) for layer in effects.layers for head in effects.heads]
        best = sorted(places, key=lambda place: effects.of(*place)["ablation"])[:2]
        drawn = sorted(path.name for path in out.glob(f"{line['id']}-*.png"))
        assert drawn == sorted(f"{line['id']}-L{layer}-H{head}.png" for layer, head in best)
    records = [json.loads(row) for row in (out / "manifest.jsonl").read_text().splitlines()]
    (failed,) = [record for record in records if record["status"] == "failed"]
    assert failed["id"] == "none" and 'has no "answer"' in failed["error"]


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm"])
def test_an_answer_read_at_a_bare_space_says_which_token_it_reads(runner, generators, family):
    """' 東京' on a tokenizer without those characters begins with a space of its own: the
    effects were on that space, said nowhere, and answer_token in JSON was empty. It is
    said as text, a space (GPT-2's vocabulary spells it Ġ, Llama's ▁: neither is shown)."""
    piece = " "
    from attnviz.cli import app

    command = ["heads", "--model", generators[family], TEXT, "--answer", " 東京"]
    result = runner.invoke(app, [*command, "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        f"attnviz: warning: the answer ' 東京' is read at its first token, '{piece}', which "
        "holds a space and none of its characters: to read '東', end the text with the space "
        "and begin the answer without it\n"
    )
    assert json.loads(result.stdout)["answer_token"] == piece
    table = runner.invoke(app, command)
    assert f"answer '{piece}' · log-probability" in table.stdout


def test_an_answer_or_a_text_the_tokenizer_drops_whole_is_said(runner, tmp_path):
    """A tokenizer with no <unk> drops what its vocabulary lacks: such an answer was
    refused for joining the text's last token, and such a text read silently."""
    from attnviz.cli import app
    from tests import tiny_models

    model = str(tiny_models.llama(tmp_path / "llama", lm=True, unknown=False))
    extractor = attnviz.load(model)
    with pytest.raises(UsageError, match=r"the answer '東京' tokenizes to nothing: .*drops every"):
        extractor.head_effects(TEXT, "東京")
    shown = runner.invoke(app, ["show", "--model", model, "東京", "-f", "json"])
    assert shown.exit_code == 2 and shown.stdout == ""
    assert shown.stderr == (
        f"attnviz: error: the text tokenizes to nothing: {model}'s tokenizer drops every "
        "character of it (none is in its vocabulary)\n"
    )
    source = tmp_path / "in.txt"
    source.write_text(f"東京\n{TEXT}\n")
    batch = runner.invoke(app, ["batch", str(source), "--model", model, "-o", str(tmp_path / "o")])
    assert batch.exit_code == 3 and "1 of 2 inputs failed (first: line 1: the text tokenizes" in (
        batch.stderr
    )


def test_a_text_cut_to_the_models_length_is_said_once_with_an_answer(runner, generators):
    from attnviz.cli import app

    long = " ".join(f"w{i}" for i in range(80))
    result = runner.invoke(app, ["heads", "--model", generators["gpt2-lm"], long, "--answer", " x"])
    assert result.exit_code == 2
    warning, error = result.stderr.splitlines()
    assert warning.startswith("attnviz: warning: the text has ") and "were dropped" in warning
    assert (
        error
        == "attnviz: error: the text was cut to the model's length: there is no answer after it"
    )


@pytest.mark.parametrize("method", ["exact", "gradient"])
@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm", "gemma2-lm"])
def test_statistics_and_effects_come_from_one_encoding_and_one_clean_pass(
    generators, family, method, monkeypatch
):
    """heads --answer encoded the text twice and ran the model twice before its effects'
    passes: the statistics' pass, then the effects' clean pass, which now records them
    (the gradient estimate's too, whose clean pass asks for gradients)."""
    from attnviz.pretrained import encoding

    extractor = attnviz.load(generators[family])
    alone = extractor.head_statistics(TEXT)
    effects = extractor.head_effects(TEXT, ANSWER, method=method)
    encoded, forwards = [], []
    encode, forward = encoding.encode, extractor.loaded.model.forward
    monkeypatch.setattr(encoding, "encode", lambda *a, **k: encoded.append(1) or encode(*a, **k))
    monkeypatch.setattr(
        extractor.loaded.model, "forward", lambda *a, **k: forwards.append(1) or forward(*a, **k)
    )
    extractor.head_effects(TEXT, ANSWER, method=method)
    effects_alone = len(forwards)  # the clean pass, and the ablations' from the first layer
    encoded.clear(), forwards.clear()
    both = extractor.head_statistics(TEXT, answer=ANSWER, method=method)
    assert len(encoded) == 1 and len(forwards) == effects_alone
    for found, expected in zip(both.rows, alone.rows, strict=True):
        for name in ("entropy", "distance", "sink", "previous", "self"):
            assert found[name] == pytest.approx(expected[name], abs=1e-5)
    np.testing.assert_allclose(both.effects.ablation, effects.ablation, atol=1e-5)
    np.testing.assert_allclose(both.effects.dla, effects.dla, atol=1e-5)
    assert both.effects.log_prob == pytest.approx(effects.log_prob, abs=1e-6)


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm", "gemma2-lm"])
def test_statistics_of_a_gradient_pass_whose_layers_are_computed_again_are_read_once(
    generators, family, monkeypatch
):
    """A long text's gradient pass computes each layer again in the backward pass, its
    attention function too: the statistics are the forward's, read once."""
    from attnviz.pretrained import backward_pass

    extractor = attnviz.load(generators[family])
    alone = extractor.head_statistics(TEXT)
    kept = extractor.head_effects(TEXT, ANSWER, method="gradient")
    monkeypatch.setattr(backward_pass, "KEPT_FOR_BACKWARD", 0)
    both = extractor.head_statistics(TEXT, answer=ANSWER, method="gradient")
    for found, expected in zip(both.rows, alone.rows, strict=True):
        for name in ("entropy", "distance", "sink", "previous", "self"):
            assert found[name] == pytest.approx(expected[name], abs=1e-5)
    np.testing.assert_allclose(both.effects.ablation, kept.ablation, atol=1e-6)
    np.testing.assert_allclose(both.effects.dla, kept.dla, atol=1e-6)


def test_one_request_reads_every_product_of_each_input(generators):
    """The door: maps, statistics and effects of a batch of inputs from one request, each
    equal to what the method named after it gives; an input without an answer has no
    effects, and its statistics none joined in."""
    from attnviz.inputs import Input
    from attnviz.request import Request

    extractor = attnviz.load(generators["llama-lm"])
    asked = Request(statistics=True, effects=True, ablate="mean", heads=[0, 1])
    answered, plain = extractor.run([Input(TEXT, answer=ANSWER), "the cat sat"], asked)
    for found, text in ((answered, TEXT), (plain, "the cat sat")):
        alone = extractor.extract(text, heads=[0, 1])
        np.testing.assert_allclose(found.maps.weights, alone.weights, atol=1e-6)
        expected = extractor.head_statistics(text, heads=[0, 1])
        for row, want in zip(found.statistics.rows, expected.rows, strict=True):
            assert (row.layer, row.head) == (want.layer, want.head)
            assert row["entropy"] == pytest.approx(want["entropy"], abs=1e-5)
    effects = extractor.head_effects(TEXT, ANSWER, ablate="mean", heads=[0, 1])
    np.testing.assert_allclose(answered.effects.ablation, effects.ablation, atol=1e-6)
    assert answered.statistics.effects is answered.effects
    assert plain.effects is None and plain.statistics.effects is None


def test_heads_checks_the_text_and_the_answer_once(runner, generators, monkeypatch):
    """The command line checks what it is given before the model loads; the extractor
    reads the checked input as it is, not checking it again."""
    from attnviz import inputs as requests
    from attnviz.cli import app

    checked = []
    check_text, check_answer = requests.check_text, requests.check_answer
    monkeypatch.setattr(
        requests,
        "check_text",
        lambda text, what="text": checked.append(what) or check_text(text, what),
    )
    monkeypatch.setattr(
        requests, "check_answer", lambda answer: checked.append("answer") or check_answer(answer)
    )
    result = runner.invoke(
        app, ["heads", TEXT, "--model", generators["gpt2-lm"], "--answer", ANSWER, "-f", "json"]
    )
    assert result.exit_code == 0, result.stderr
    assert sorted(checked) == ["answer", "text"]


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm"])
def test_the_answers_rank_probability_and_the_models_next_tokens(generators, family):
    """Held to the model's own next-token distribution for the same ids."""
    extractor = attnviz.load(generators[family])
    effects = extractor.head_effects(TEXT, ANSWER, method="gradient")
    tokenizer, model = extractor.loaded.tokenizer, extractor.loaded.model
    ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model(ids).logits[0, -1].float().log_softmax(-1)
    answer_id = tokenizer(TEXT + ANSWER)["input_ids"][ids.shape[1]]
    on = effects.on
    # Two float32 computations of the logits: tokens whose log-probabilities lie within
    # their rounding of each other may rank either way.
    tolerance = model_tolerance(model.config) * max(1.0, float(expected.abs().max()))
    answer = expected[answer_id]
    surely_above = int((expected > answer + tolerance).sum())
    assert surely_above + 1 <= on.rank <= int((expected > answer - tolerance).sum()) + 1
    assert on.probability == pytest.approx(float(answer.exp()), rel=tolerance)
    best = expected.topk(10)
    np.testing.assert_allclose(
        [p for _, p in on.predictions[:10]], best.values.exp(), rtol=tolerance
    )
    by_token: dict[str, list[float]] = {}
    for token, value in enumerate(expected.exp().tolist()):
        by_token.setdefault(tokenizer.decode([token]), []).append(value)
    for token, probability in on.predictions[:10]:  # each the model's own token, its number
        assert min(abs(p - probability) for p in by_token[token]) <= tolerance * probability
    assert len(on.predictions) == 100


def test_an_answer_missing_its_space_is_said_with_its_twin(runner, generators):
    """--answer "Paris" read a log-probability of -7.57 where " Paris" had -0.26, silently."""
    from attnviz.cli import app

    path = generators["gpt2-lm"]
    on = attnviz.load(path).head_effects(TEXT, ANSWER, method="gradient").on
    spaced = [token for token, _ in on.predictions[:10] if token[:1] == " " and token[1:]]
    ranks = {}
    for token in spaced:
        found = runner.invoke(app, ["heads", TEXT, "--model", path, "--answer", token[1:], "-f",
                                    "json", "--method", "gradient", "--top", "1"])  # fmt: skip
        document = json.loads(found.stdout)
        ranks[token] = (document["answer_rank"], document["answer_probability"], found.stderr)
    twin, (rank, probability, said) = next((t, got) for t, got in ranks.items() if got[0] > 10)
    twin_rank = [token for token, _ in on.predictions].index(twin) + 1
    assert said == (
        f"attnviz: warning: the answer {twin[1:]!r} is the model's next token number {rank:,} "
        f"(probability {probability:.2g}); {twin!r}, with a space first, is number "
        f"{twin_rank}: did you mean --answer {twin!r}?\n"
    )
    assert all(got[2] == "" for got in ranks.values() if got[0] <= 10)


def test_predictions_list_the_models_next_tokens_above_the_table_and_in_json(runner, generators):
    from attnviz.cli import app
    from tests.checks import failed_in_process

    path = generators["gpt2-lm"]
    common = ["heads", TEXT, "--model", path, "--answer", ANSWER, "--top", "1"]
    document = json.loads(runner.invoke(app, [*common, "-f", "json", "--predictions", "3"]).stdout)
    listed = document["predictions"]
    assert len(listed) == 3 and listed[0]["probability"] >= listed[2]["probability"]
    table = runner.invoke(app, [*common, "--predictions", "3"], env={"COLUMNS": "300"}).stdout
    said = " · ".join(f"{entry['token']!r} {entry['probability']:.3g}" for entry in listed)
    assert f"the model's next tokens: {said}" in table
    assert f"the model's number {document['answer_rank']:,})" in table
    plain = json.loads(runner.invoke(app, [*common, "-f", "json"]).stdout)
    assert "predictions" not in plain and plain["answer_rank"] == document["answer_rank"]
    failed_in_process(runner.invoke(app, [*common, "-f", "csv", "--predictions", "3"]), 2, "csv")
    failed_in_process(
        runner.invoke(app, ["heads", TEXT, "--model", path, "--predictions", "3"]), 2, "--answer"
    )


@pytest.mark.parametrize("method", ["exact", "gradient"])
def test_ablate_none_runs_no_ablation_and_gives_the_same_dla_and_patch(
    runner, generators, monkeypatch, method
):
    """Head patching asked alone: the ablation sweep (or its estimate) is never run; dla
    and patch are those of the whole read."""
    from attnviz.cli import app

    model, corrupt = generators["llama-lm"], twins.CORRUPT
    extractor = attnviz.load(model)
    whole = extractor.head_effects(TEXT, ANSWER, corrupt=corrupt, method=method)

    def refused(*_args, **_kwargs):
        raise AssertionError("the ablation sweep ran")

    monkeypatch.setattr("attnviz.pretrained.effects._ablation", refused)
    monkeypatch.setattr("attnviz.pretrained.answered.ablation_estimate", refused)
    alone = extractor.head_effects(TEXT, ANSWER, corrupt=corrupt, method=method, ablate="none")
    assert alone.ablation is None and alone.patch is not None
    tolerance = model_tolerance(extractor.loaded.model.config)  # a pass with or without grad
    np.testing.assert_allclose(alone.dla, whole.dla, atol=tolerance)
    np.testing.assert_allclose(alone.patch, whole.patch, atol=tolerance)
    assert alone.picture().data.startswith(b"\x89PNG")  # the patch, drawn by default
    command = ["heads", "--model", model, TEXT, "--answer", ANSWER, "--corrupt", corrupt]
    command += ["--ablate", "none", "--method", method, "-f", "json"]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["heads"]
    assert "ablation" not in rows[0] and "patch" in rows[0]
    assert [row["patch"] for row in rows] == sorted((row["patch"] for row in rows), reverse=True)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["heads", "--sort", "ablation"], "--ablate none skips"),
        (["show", "--top-heads", "2"], "--by ablation reads an effect this run left out"),
    ],
)
def test_what_reads_the_ablation_is_refused_without_it(runner, generators, arguments, message):
    from attnviz.cli import app

    command, *rest = arguments
    result = runner.invoke(
        app,
        [command, "--model", generators["llama-lm"], TEXT, "--answer", ANSWER, "--ablate", "none",
         *rest],
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""
