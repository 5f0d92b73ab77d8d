"""explain: the built-in walk-through reproduces the stack's own numbers, and a
pretrained model's query row reproduces the model's own attention."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import attnviz
from attnviz.builtin import BuiltinConfig, BuiltinTransformer
from attnviz.builtin.explain import weighted_sum_sentence
from attnviz.cli import app
from attnviz.errors import UsageError

SMALL = BuiltinConfig(d_model=8, num_heads=2)
PRETRAINED_TEXT = "Hello I love the dog"
PRETRAINED_TARGET = "Bonjour je t'aime"


def explain_builtin(text, config=None, **request):
    return attnviz.load(config=config).explain(text, **request)


@pytest.mark.parametrize(
    ("mode", "target", "layer", "head"),
    [("self", None, 0, 1), ("masked", None, 1, 0), ("cross", "je t'aime", 1, 1)],
)
def test_explained_weights_equal_the_stacks(mode, target, layer, head):
    explanation = explain_builtin(
        "attention is cool", mode=mode, target=target, layer=layer, head=head, config=SMALL
    )
    maps = attnviz.extract("attention is cool", mode=mode, target=target, config=SMALL)
    np.testing.assert_allclose(
        explanation.step("weights").matrix, maps.head(layer, head), atol=1e-6
    )
    scaled = explanation.step("scores").matrix / math.sqrt(explanation.head_dim)
    np.testing.assert_allclose(explanation.step("scaled").matrix, scaled, rtol=1e-6)


def test_explained_output_equals_the_attention_modules_output():
    stack = BuiltinTransformer(SMALL)
    captured = {}
    module = stack.encoder[0].attention
    handle = module.register_forward_hook(lambda _m, _a, output: captured.update(out=output[0]))
    stack.attention_maps(["attention", "is", "cool"], layers=[0])
    handle.remove()
    explanation = explain_builtin("attention is cool", layer=0, head=0, config=SMALL)
    np.testing.assert_allclose(
        explanation.step("output").matrix, captured["out"][0].numpy(), atol=1e-5
    )
    # Q, K and V are the input times this head's slice of the module's projections.
    x = torch.from_numpy(explanation.step("X").matrix)
    expected_q = (x @ module.q_proj.weight[:4].T + module.q_proj.bias[:4]).detach().numpy()
    np.testing.assert_allclose(explanation.step("Q").matrix, expected_q, atol=1e-5)


def test_masked_mode_hides_the_future():
    explanation = explain_builtin("attention is cool", mode="masked", config=SMALL)
    mask = explanation.step("mask").matrix
    weights = explanation.step("weights").matrix
    above = np.triu(np.ones((3, 3), dtype=bool), 1)
    assert (mask[above] == -math.inf).all() and (mask[~above] == 0).all()
    assert (weights[above] == 0).all()
    np.testing.assert_allclose(weights.sum(-1), 1, rtol=1e-6)


def test_sentences_spell_out_the_weighted_sums():
    assert (
        weighted_sum_sentence("cool", np.array([0.2, 0.5, 0.3]), ["attention", "is", "cool"])
        == "cool = 0.20·v(attention) + 0.50·v(is) + 0.30·v(cool)"
    )
    explanation = explain_builtin("attention is cool", mode="masked", config=SMALL)
    assert explanation.sentences[0] == "attention = 1.00·v(attention)"


def test_one_layer_and_one_head():
    with pytest.raises(UsageError, match="one layer"):
        explain_builtin("a b", layer="0-1")
    with pytest.raises(UsageError, match="head 9 is out of range"):
        explain_builtin("a b", head=9)


def _explained(runner, *arguments: str) -> dict:
    """``explain`` of ``arguments`` as JSON, read."""
    result = runner.invoke(app, ["explain", *arguments, "-f", "json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_json_holds_every_step_and_matches_the_stack(runner):
    document = _explained(runner, "attention is cool", "-m", "masked", "--d-model", "8",
                          "--num-heads", "2", "--head", "1")  # fmt: skip
    assert document["schema_version"] == attnviz.SCHEMA_VERSION  # the one envelope
    assert attnviz.load().explain("a b").to_dict()["schema_version"] == attnviz.SCHEMA_VERSION
    names = ["X", "W_Q", "W_K", "W_V", "Q", "K", "V", "scores", "scaled", "mask", "weights",
             "head_output", "concat", "W_O", "output"]  # fmt: skip
    assert list(document["steps"]) == names
    assert document["steps"]["mask"]["matrix"][0][1] is None  # -inf is written as null
    expected = attnviz.extract("attention is cool", mode="masked", config=SMALL).head(0, 1)
    np.testing.assert_allclose(document["steps"]["weights"]["matrix"], expected, atol=1e-6)
    assert document["steps"]["Q"]["shape"] == [3, 4]


def test_walk_through_snapshot_at_100_columns(runner, snapshot):
    result = runner.invoke(
        app, ["explain", "attention is cool", "--mode", "masked", "--d-model", "8",
              "--num-heads", "2", "--width", "100"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    snapshot("explain_masked_100.txt", result.stdout)


def test_the_walk_through_of_a_stack_named_by_its_settings(runner):
    arguments = ["explain", "attention is cool", "--mode", "masked", "--width", "100"]
    named = runner.invoke(app, [*arguments, "--model", "builtin:d_model=8,heads=2"])
    assert named.exit_code == 0, named.stderr
    optioned = runner.invoke(app, [*arguments, "--d-model", "8", "--num-heads", "2"])
    assert named.stdout == optioned.stdout


def test_large_matrices_are_cut_with_their_shape_stated(runner):
    result = runner.invoke(app, ["explain", "the man walked the dog", "--width", "80"])
    assert result.exit_code == 0
    assert "showing the first and last rows and columns of 5 × 64" in result.stdout
    assert "d63" in result.stdout and "d40" not in result.stdout


def test_explain_shows_escapes_in_the_text_as_visible_characters(runner):
    result = runner.invoke(app, ["explain", "a \x1b[2J b\u202e", "--d-model", "8"])
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout


def test_explain_labels_raw_pieces_too(tiny):
    extractor = attnviz.load(str(tiny["bert"]))
    raw = json.dumps(extractor.explain("unbelievable tokenization", raw_pieces=True).to_dict())
    cleaned = json.dumps(extractor.explain("unbelievable tokenization").to_dict())
    assert "##" in raw and "##" not in cleaned


@pytest.mark.parametrize(
    ("family", "mode", "target"),
    [("bert", None, None), ("gpt2", None, None), ("llama", None, None),
     ("bart", "cross", PRETRAINED_TARGET), ("t5", "self", None),
     ("t5", "masked", PRETRAINED_TARGET)],
)  # fmt: skip
def test_explained_query_row_matches_the_models_own(tiny, family, mode, target):
    explanation = attnviz.load(tiny[family]).explain(
        PRETRAINED_TEXT, mode=mode, target=target, layer=1, head=1, query=2
    )
    own = attnviz.extract(
        PRETRAINED_TEXT, model=tiny[family], mode=mode, target=target, layers=1, heads=1
    )
    np.testing.assert_allclose(explanation.weights, own.weights[0, 0, 2], atol=1e-6)
    assert explanation.largest_difference < 1e-6
    assert explanation.query_token == own.query_tokens[2]
    if explanation.mode == "masked":
        assert np.isneginf(explanation.mask[3:]).all()  # the keys after the query are hidden
        assert (explanation.weights[3:] == 0).all()


@pytest.mark.minilm
def test_explain_minilm_through_the_cli(runner):
    document = _explained(runner, "--model", "minilm", "The man walked the dog", "-l", "2",
                          "--head", "3", "--query", "3")  # fmt: skip
    assert document["query_token"] == "walked"
    assert document["largest_difference"] < 1e-6
    assert sum(document["weights"]) == pytest.approx(1.0)
    table = runner.invoke(app, ["explain", "--model", "minilm", "hi", "--query", "1"])
    assert "model's own" in table.stdout
    bad = runner.invoke(app, ["explain", "--model", "minilm", "hi", "--query", "7"])
    assert bad.exit_code == 2 and "--query 7 is out of range" in bad.stderr
