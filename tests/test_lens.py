"""The logit lens (`attnviz lens`, `Extractor.lens`): each layer's residual stream through
the final norm and the unembedding, held to plain hooks, and its last layer to the model's
own next-token distribution."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnviz.cli import app
from tests.checks import failed_in_process, model_tolerance
from tests.hook_references import ANSWER, TEXT, answer_token_id, final_norm, layers_of


def _reference(model, ids, answer_id):
    """Each layer's output, recorded by a plain hook, through the model's final norm and
    its output embeddings: (L, T) top ids, their probabilities, the answer's log-probability."""
    kept = {}
    handles = [
        layer.register_forward_hook(
            lambda _m, _a, out, index=index: kept.__setitem__(
                index, out[0] if isinstance(out, tuple) else out
            )
        )
        for index, layer in enumerate(layers_of(model))
    ]
    try:
        with torch.no_grad():
            model(input_ids=ids)
            logs = []
            for index in sorted(kept):
                logits = model.get_output_embeddings()(final_norm(model)(kept[index]))[0].double()
                cap = getattr(model.config, "final_logit_softcapping", None)
                if cap:
                    logits = torch.tanh(logits / cap) * cap
                logs.append(logits.log_softmax(-1))
    finally:
        for handle in handles:
            handle.remove()
    stacked = torch.stack(logs)  # (L, T, V)
    best, top = stacked.max(-1)
    return top.numpy(), best.exp().numpy(), stacked[..., answer_id].numpy(), stacked


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm", "gemma2-lm", "gemma3-lm"])
def test_the_lens_equals_each_layer_read_through_the_final_norm(
    generators, language_models, family
):
    extractor = language_models[family]
    model = extractor.loaded.model
    path = generators[family]
    ids = extractor.loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    answer_id = answer_token_id(path, TEXT, ANSWER)
    lens = extractor.lens(TEXT, ANSWER)
    top, probability, answer, log_probs = _reference(model, ids, answer_id)
    tolerance = model_tolerance(model.config)
    assert lens.top_ids.shape == top.shape == (len(layers_of(model)), ids.shape[1])
    np.testing.assert_allclose(lens.probability, probability, atol=tolerance)
    np.testing.assert_allclose(lens.answer, answer, atol=tolerance)
    # attnviz's top token is the reference's, or one as likely there (a near tie)
    chosen = log_probs.gather(-1, torch.from_numpy(lens.top_ids)[..., None])[..., 0].exp()
    np.testing.assert_allclose(chosen.numpy(), probability, atol=tolerance)
    # the last layer's lens is the model's own prediction
    with torch.no_grad():
        own = model(input_ids=ids).logits[0].double().log_softmax(-1)
    np.testing.assert_allclose(lens.answer[-1], own[:, answer_id].numpy(), atol=tolerance)
    assert lens.top[-1][-1] == extractor.loaded.tokenizer.decode([int(own[-1].argmax())]) or (
        lens.top_ids[-1, -1] == int(own[-1].argmax())
    )


def test_the_lens_tokens_are_the_tokenizers_text_a_space_shown_as_one(
    runner, generators, language_models
):
    """Each cell's token is the tokenizer's decoding of its id (GPT-2's byte-level
    vocabulary spells a leading space Ġ); the table shows its spaces as ␣, never Ġ."""
    lens = language_models["gpt2-lm"].lens(TEXT)
    decode = language_models["gpt2-lm"].loaded.tokenizer.decode
    for row, ids in zip(lens.top, lens.top_ids, strict=True):
        assert row == [decode([int(token)]) for token in ids]
    spaced = {token for row in lens.top for token in row if token.startswith(" ")}
    assert spaced, "some predicted token begins with a space"
    drawn = runner.invoke(app, ["lens", TEXT, "--model", generators["gpt2-lm"], "--width", "200"])
    assert drawn.exit_code == 0, drawn.stderr
    assert "Ġ" not in drawn.stdout
    assert all("␣" + token[1:][:7] in drawn.stdout for token in spaced)


def test_lens_writes_a_table_json_csv_and_a_picture(runner, generators, tmp_path):
    path = generators["gpt2-lm"]
    common = ["lens", TEXT, "--model", path]
    drawn = runner.invoke(app, [*common, "--width", "120"])
    assert drawn.exit_code == 0, drawn.stderr
    assert "logit lens" in drawn.stdout and "layer 1" in drawn.stdout
    document = json.loads(runner.invoke(app, [*common, "--answer", ANSWER, "-f", "json"]).stdout)
    assert set(document) >= {"top", "top_ids", "probability", "answer", "tokens", "layers"}
    assert np.array(document["probability"]).shape == (len(document["layers"]), 6)
    rows = runner.invoke(app, [*common, "-f", "csv"]).stdout.splitlines()
    assert rows[0] == "layer,position,token,top,top_id,probability"
    picture = tmp_path / "lens.png"
    assert runner.invoke(app, [*common, "--picture", str(picture)]).exit_code == 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "the built-in stack"),
        (["--answer", " it", "--versus", " the"], "No such option: --versus"),
    ],
)
def test_lens_usage_errors(runner, arguments, message):
    result = runner.invoke(app, ["lens", TEXT, *arguments])
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""


@pytest.mark.parametrize("model", ["builtin", "bert", "bart"])
def test_a_model_without_a_next_token_is_refused_naming_the_lens(runner, tiny, model):
    """No --answer was given: the refusal names what asked for the next token, the lens."""
    arguments = [] if model == "builtin" else ["--model", tiny[model]]
    result = runner.invoke(app, ["lens", TEXT, *arguments])
    failed_in_process(result, 2, "the lens")
    assert "--answer" not in result.stderr


def test_the_lens_table_aligns_its_rows_at_any_layer_count():
    from rich.console import Console

    from attnviz.analysis.lens import Lens
    from attnviz.render.lens import lens_table

    layers = [0, 9, 10, 99, 100, 101]
    lens = Lens(
        "m", ["a", "b"], layers, [[" x", "y"] for _ in layers],
        np.zeros((6, 2), dtype=int), np.full((6, 2), 0.5),
    )  # fmt: skip
    console = Console(width=60, record=True, color_system=None)
    console.print(lens_table(lens, 60))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.strip().startswith("a "))
    rows = [line for line in lines if line.startswith("layer ")]
    assert len(rows) == len(layers)
    assert {row.index("␣x") for row in rows} == {header.index("a")}
