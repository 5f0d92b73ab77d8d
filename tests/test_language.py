"""Sentence pairs and chat prompts (issue 13): the encodings the models were trained on,
held to the models' own output_attentions."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import attnviz
from attnviz.cli import app
from attnviz.errors import UsageError
from attnviz.panels import notes_of
from tests import tiny_models
from tests.checks import model_tolerance

A, B = "The man walked the dog", "Attention is all you need"
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory):
    """A tiny Llama language model whose tokenizer has a chat template."""
    from transformers import AutoTokenizer

    folder = tiny_models.llama(tmp_path_factory.mktemp("chat") / "llama-chat", lm=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_a_pair_equals_the_models_own_attention_with_its_pair_encoding(tiny):
    extractor = attnviz.load(tiny["bert"])
    maps = extractor.extract(A, pair=B)
    tokenizer, model = extractor.loaded.tokenizer, extractor.loaded.model
    encoded = tokenizer(A, text_pair=B, return_tensors="pt", return_token_type_ids=True)
    model.set_attn_implementation("eager")  # the implementation that returns weights
    with torch.inference_mode():
        own = model(**encoded, output_attentions=True).attentions
    for layer in maps.layers:
        np.testing.assert_allclose(
            maps.weights[layer], own[layer][0].numpy(), atol=model_tolerance(model.config)
        )
    types = encoded["token_type_ids"][0].tolist()
    assert maps.pair_start == types.index(1) and maps.pair == B
    assert maps.query_tokens.count("[SEP]") == 2 and maps.query_tokens[0] == "[CLS]"
    document = maps.to_dict()
    assert (document["pair"], document["pair_start"]) == (B, maps.pair_start)
    assert attnviz.AttentionMaps.from_dict(document).pair_start == maps.pair_start


@pytest.mark.parametrize("which", ["a-b", "b-a", "a-a", "b-b"])
def test_between_keeps_one_sentences_rows_over_the_others_columns(tiny, which):
    maps = attnviz.load(tiny["bert"]).extract(A, pair=B)
    start = maps.pair_start
    part = {"a": slice(0, start), "b": slice(start, None)}
    rows, columns = (part[side] for side in which.split("-"))
    kept = maps.between_sentences(which)
    expected = maps.weights[..., rows, columns]
    expected = expected / expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(kept.weights, expected, rtol=1e-6)
    assert kept.query_tokens == maps.query_tokens[rows]
    assert kept.key_tokens == maps.key_tokens[columns]
    assert kept.between == which and "each row renormalised" in notes_of(kept)
    np.testing.assert_allclose(kept.weights.sum(-1), 1, atol=1e-6)


def test_dropping_special_tokens_keeps_where_sentence_b_begins(tiny):
    maps = attnviz.load(tiny["bert"]).extract(A, pair=B, special=False)
    full = attnviz.load(tiny["bert"]).extract(A, pair=B)
    assert "[SEP]" not in maps.query_tokens
    assert maps.query_tokens[maps.pair_start] == full.query_tokens[full.pair_start]


@pytest.mark.parametrize(("which", "message"), [("gpt2", "read by encoders"), ("t5", "encoders")])
def test_pairs_are_for_encoders(tiny, which, message):
    target = {"target": "ja"} if which == "t5" else {}
    with pytest.raises(UsageError, match=message):
        attnviz.load(tiny[which]).extract(A, pair=B, **target)
    with pytest.raises(UsageError, match="pretrained encoders"):
        attnviz.load().extract(A, pair=B)


def test_show_with_pair_and_between_on_the_command_line(runner, tiny):
    result = runner.invoke(
        app, ["show", "--model", tiny["bert"], A, "--pair", B, "--between", "a-b", "-f", "json",
              "-l", "0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["between"] == "a-b" and document["key_tokens"][0] != "[CLS]"
    drawn = runner.invoke(
        app, ["show", "--model", tiny["bert"], A, "--pair", B, "-f", "terminal", "-l", "0",
              "--head", "0", "--color", "never", "--width", "200"],
    )  # fmt: skip
    assert "sentence B from token" in drawn.stdout
    for arguments, message in [
        (["--between", "a-b"], "give sentence B with --pair"),
        (["--pair", B, "--between", "a-c"], "give a-b, b-a, a-a, b-b"),
    ]:
        refused = runner.invoke(app, ["show", "--model", tiny["bert"], A, *arguments])
        assert refused.exit_code == 2 and message in refused.stderr


def test_batch_reads_pairs_from_jsonl(runner, tiny, tmp_path):
    source = tmp_path / "pairs.jsonl"
    source.write_text(json.dumps({"text": A, "pair": B}) + "\n" + json.dumps({"text": B}) + "\n")
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["batch", str(source), "-o", str(out), "--model", tiny["bert"], "-f", "json", "-q"]
    )
    assert result.exit_code == 0, result.stderr
    first, second = sorted(out.glob("000*.json"))
    assert json.loads(first.read_text())["pair"] == B
    assert "pair" not in json.loads(second.read_text())
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [record["pair"] for record in manifest] == [B, None]
    source.write_text(json.dumps({"text": A, "pair": "changed"}) + "\n" + json.dumps({"text": B}))
    again = runner.invoke(
        app, ["batch", str(source), "-o", str(out), "--model", tiny["bert"], "-f", "json",
              "--resume"],
    )  # fmt: skip
    assert "1 written" in again.stderr and "1 skipped" in again.stderr  # the changed pair redone


def test_chat_renders_the_template_and_labels_its_tokens_special(chat_model):
    extractor = attnviz.load(chat_model)
    maps = extractor.extract(A, chat=True, system="Be brief")
    tokenizer = extractor.loaded.tokenizer
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief"}, {"role": "user", "content": A}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert len(maps.query_tokens) == len(ids)
    extractor.loaded.model.set_attn_implementation("eager")  # the one that returns weights
    with torch.inference_mode():
        own = extractor.loaded.model(torch.tensor([ids]), output_attentions=True).attentions
    tolerance = model_tolerance(extractor.loaded.model.config)
    np.testing.assert_allclose(maps.weights[0], own[0][0].numpy(), atol=tolerance)
    words = attnviz.load(chat_model).extract(A, chat=True, system="Be brief", special=False)
    spoken = "".join(words.query_tokens).replace("▁", "")
    assert "assistant" not in spoken and "user" not in spoken  # the template's words
    assert "man walked the dog" in spoken  # the user's own words are kept
    generation = extractor.generate(A, max_new_tokens=3, chat=True)
    assert generation.maps.query_special[0] is True  # the template's <s>


def test_chat_needs_a_template_and_system_needs_chat(runner, tiny, chat_model):
    no_template = runner.invoke(app, ["show", "--model", tiny["gpt2"], A, "--chat"])
    assert no_template.exit_code == 2 and "has no chat template" in no_template.stderr
    no_chat = runner.invoke(app, ["show", "--model", chat_model, A, "--system", "x"])
    assert no_chat.exit_code == 2 and "add --chat" in no_chat.stderr
    builtin = runner.invoke(app, ["show", A, "--chat"])
    assert builtin.exit_code == 2 and "instruct model" in builtin.stderr
    generated = runner.invoke(
        app, ["generate", "--model", chat_model, A, "--chat", "-n", "2", "-f", "json"]
    )
    assert generated.exit_code == 0, generated.stderr
    assert json.loads(generated.stdout)["prompt_length"] > len(A.split())


def test_a_saved_chat_records_its_template_and_system_prompt(chat_model, tmp_path):
    maps = attnviz.load(chat_model).extract(A, chat=True, system="Be brief")
    document = maps.to_dict()
    assert (document["chat"], document["system"]) == (True, "Be brief")
    for name in ("chat.json", "chat.npz"):
        maps.save(tmp_path / name)
        (again,) = attnviz.read_maps(str(tmp_path / name))
        assert (again.recorded.chat, again.recorded.system) == (True, "Be brief")
    assert "read as a chat with a system prompt" in notes_of(maps)
    plain = attnviz.load(chat_model).extract(A).to_dict()
    assert "chat" not in plain and "system" not in plain


def test_a_template_that_refuses_the_chat_is_one_line(runner, chat_model, tmp_path):
    from transformers import AutoTokenizer

    folder = tmp_path / "no-system"
    shutil.copytree(chat_model, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = (
        "{% if messages[0]['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}" + CHAT_TEMPLATE
    )
    tokenizer.save_pretrained(folder)
    result = runner.invoke(
        app, ["show", "--model", str(folder), A, "--chat", "--system", "x", "-f", "json"]
    )
    assert result.exit_code == 2
    assert result.stderr == (
        f"attnviz: error: the chat template of {folder} refuses this chat (System role not "
        "supported): drop --system\n"
    )
    assert (
        runner.invoke(app, ["show", "--model", str(folder), A, "--chat", "-f", "json"]).exit_code
        == 0
    )


def test_chat_model_folder_is_kept_apart(chat_model, tiny):
    # the fixture wrote into its own folder, not the shared tiny models
    assert not shutil.os.path.samefile(chat_model, tiny["llama"])


@pytest.mark.parametrize("which", ["a-b", "b-a", "a-a", "b-b"])
def test_between_maps_get_only_the_statistics_that_apply(tiny, which):
    from attnviz.analysis.aggregate import aggregate
    from attnviz.analysis.heads import TopHeads, head_statistics
    from attnviz.head_columns import RankBy

    maps = attnviz.load(tiny["bert"]).extract(A, pair=B).between_sentences(which)
    rows = head_statistics(maps)
    positional = ("distance", "previous", "self", "previous_token", "duplicate_token", "induction")
    crossing = which in ("a-b", "b-a")
    for row in rows:
        assert row.entropy > 0 and 0 <= row.sink <= 1
        assert all((getattr(row, name) is None) == crossing for name in positional[:3])
    if crossing:
        with pytest.raises(ValueError, match="which maps between two sentences do not share"):
            TopHeads(2, RankBy.SELF).panels(maps)
        with pytest.raises(UsageError, match="these maps hold one sentence's rows over the other"):
            aggregate(maps, "rollout")
    else:  # one sentence over itself: one sequence still
        assert len(TopHeads(2, RankBy.SELF).panels(maps)) == 2
        np.testing.assert_allclose(aggregate(maps, "rollout").weights.sum(-1), 1, rtol=1e-5)
