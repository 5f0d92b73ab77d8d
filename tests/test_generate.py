"""generate (issue 13): what a language model wrote, and the attention of every token read
and written, held to the model's own step-by-step attention; models loaded in Python."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import attnviz
from attnviz.cli import app
from attnviz.errors import UsageError
from attnviz.panels import query_labels_of
from attnviz.pretrained.generation import GenerationInterrupted, Sampling, generation_config
from tests.checks import model_tolerance

PROMPT = "Hello I love you"


def step_by_step(extractor, sampling: Sampling, prompt: str = PROMPT):
    """transformers' own generate(output_attentions=True), with the same settings and seed."""
    loaded = extractor.loaded
    ids = torch.tensor([loaded.tokenizer(prompt)["input_ids"]])
    config = generation_config(loaded, sampling, sampling.max_new_tokens)
    config.output_attentions = config.return_dict_in_generate = True
    own = loaded.model.config._attn_implementation
    loaded.model.set_attn_implementation("eager")  # the implementation that returns weights
    try:
        with torch.random.fork_rng():
            torch.manual_seed(sampling.seed)
            return loaded.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config
            )
    finally:
        loaded.model.set_attn_implementation(own)


def stitched(steps, layer: int) -> np.ndarray:
    """The rows every step added, (H, rows, keys), padded with zeros on the right."""
    rows = [step[layer][0].float().numpy() for step in steps]  # each (H, new rows, keys so far)
    width = rows[-1].shape[-1]
    padded = [np.pad(r, ((0, 0), (0, 0), (0, width - r.shape[-1]))) for r in rows]
    return np.concatenate(padded, axis=1)


@pytest.mark.parametrize("name", ["gpt2-lm", "llama-lm"])
@pytest.mark.parametrize("sample", [False, True])
def test_decoder_maps_equal_the_models_own_step_by_step_attention(generators, name, sample):
    extractor = attnviz.load(generators[name])
    sampling = Sampling(max_new_tokens=6, sample=sample, seed=3, stop=False)
    generation = extractor.generate(PROMPT, max_new_tokens=6, sample=sample, seed=3, stop=False)
    reference = step_by_step(extractor, sampling)
    maps = generation.maps
    sequence = reference.sequences[0].tolist()
    assert len(maps.query_tokens) == len(sequence)  # the tokens the model itself wrote
    assert maps.prompt_length == len(extractor.loaded.tokenizer(PROMPT)["input_ids"])
    new = sequence[maps.prompt_length :]
    assert generation.text == extractor.loaded.tokenizer.decode(new, skip_special_tokens=True)
    for i, layer in enumerate(maps.layers):
        expected = stitched(reference.attentions, layer)  # every row but the last written token's
        np.testing.assert_allclose(
            maps.weights[i, :, : expected.shape[1], : expected.shape[2]], expected, atol=1e-5
        )
    # and one forward pass over the same sequence, as output_attentions gives it
    extractor.loaded.model.set_attn_implementation("eager")
    with torch.inference_mode():
        own = extractor.loaded.model(torch.tensor([sequence]), output_attentions=True).attentions
    for i, layer in enumerate(maps.layers):
        tolerance = model_tolerance(extractor.loaded.model.config)
        np.testing.assert_allclose(maps.weights[i], own[layer][0].numpy(), atol=tolerance)


@pytest.mark.parametrize("name", ["llama-lm", "bart-lm"])
def test_generated_rows_and_bins_are_those_of_the_whole_maps(generators, blocks, name):
    """What the written tokens read, computed block by block: a long prompt's whole maps
    need not exist."""
    from attnviz.analysis.grid import pool_map

    extractor = attnviz.load(generators[name])
    options = {"max_new_tokens": 5, "stop": False}
    whole = extractor.generate(PROMPT, **options).maps
    last = extractor.generate(PROMPT, rows="-3--1", **options).maps
    pooled = extractor.generate(PROMPT, pool=3, **options).maps
    assert blocks  # read from the model's fused attention
    rows = len(whole.query_tokens)
    assert last.query_positions == [rows - 3, rows - 2, rows - 1]
    np.testing.assert_allclose(last.weights, whole.weights[:, :, -3:], atol=1e-6)
    reference = [[pool_map(grid, pooled.pooled) for grid in layer] for layer in whole.weights]
    np.testing.assert_allclose(pooled.weights, np.array(reference), atol=1e-6)
    # Where the prompt ends is kept, a token position (it was dropped): rows and bins that
    # begin after it are labelled as written.
    assert last.prompt_length == pooled.prompt_length == whole.prompt_length
    marked = [label.startswith("▸") for label in query_labels_of(last)]
    assert marked == [position >= whole.prompt_length for position in last.query_positions]
    starts = [row * pooled.pooled for row in range(len(pooled.query_tokens))]
    marked = [label.startswith("▸") for label in query_labels_of(pooled)]
    assert marked == [start >= whole.prompt_length for start in starts]
    again = attnviz.AttentionMaps.from_dict(json.loads(json.dumps(last.to_dict())))
    assert again.prompt_length == whole.prompt_length


@pytest.mark.parametrize("name", ["gpt2-lm", "llama-lm", "bart-lm"])
def test_rows_given_as_text_find_a_written_word(generators, name):
    """Each written token spans the characters it added after the prompt: --rows finds a
    word the model wrote as it finds one of the prompt."""
    extractor = attnviz.load(generators[name])
    options = {"max_new_tokens": 6, "stop": False}
    whole = extractor.generate(PROMPT, **options)
    words = [word for word in whole.text.split() if word not in PROMPT]
    assert words, whole.text
    found = extractor.generate(PROMPT, rows=words[-1], **options).maps
    assert found.query_positions and min(found.query_positions) >= whole.maps.prompt_length
    covering = "".join(whole.maps.query_tokens[position] for position in found.query_positions)
    assert words[-1] in covering
    written = whole.maps.weights[:, :, found.query_positions]
    np.testing.assert_allclose(found.weights, written, atol=1e-6)


@pytest.mark.parametrize("mode", ["cross", "masked"])
def test_encoder_decoder_cross_attention_is_the_alignment_step_by_step(generators, mode):
    extractor = attnviz.load(generators["bart-lm"])
    sampling = Sampling(max_new_tokens=5, sample=True, seed=1, stop=False)
    generation = extractor.generate(
        PROMPT, max_new_tokens=5, sample=True, seed=1, stop=False, mode=mode
    )
    reference = step_by_step(extractor, sampling)
    maps = generation.maps
    assert maps.mode == mode and maps.prompt_length == 1  # the decoder's start token
    steps = reference.cross_attentions if mode == "cross" else reference.decoder_attentions
    source = extractor.loaded.tokenizer(PROMPT)["input_ids"]
    assert len(maps.key_tokens) == (len(source) if mode == "cross" else len(maps.query_tokens))
    for i, layer in enumerate(maps.layers):
        expected = stitched(steps, layer)
        np.testing.assert_allclose(
            maps.weights[i, :, : expected.shape[1], : expected.shape[2]], expected, atol=1e-5
        )


def test_sampling_is_reproducible_and_leaves_the_callers_random_state_alone(generators):
    extractor = attnviz.load(generators["gpt2-lm"])
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first = extractor.generate(PROMPT, max_new_tokens=8, sample=True, seed=7, stop=False)
    assert torch.equal(torch.random.get_rng_state(), before)
    again = extractor.generate(PROMPT, max_new_tokens=8, sample=True, seed=7, stop=False)
    assert first.text == again.text
    texts = {
        extractor.generate(PROMPT, max_new_tokens=8, sample=True, seed=s, stop=False).text
        for s in range(4)
    }
    assert len(texts) > 1  # the seed matters


def test_generated_maps_survive_json_and_older_readers_ignore_the_new_field(generators):
    generation = attnviz.load(generators["llama-lm"]).generate(PROMPT, max_new_tokens=3)
    document = generation.maps.to_dict()
    assert document["prompt_length"] == generation.maps.prompt_length
    back = attnviz.AttentionMaps.from_dict(json.loads(json.dumps(document)))
    assert back.prompt_length == generation.maps.prompt_length
    document.pop("prompt_length")  # what a reader that knows no prompt_length sees
    assert attnviz.AttentionMaps.from_dict(document).prompt_length is None
    with pytest.raises(attnviz.errors.AttnvizError, match="prompt_length"):
        attnviz.AttentionMaps.from_dict({**generation.maps.to_dict(), "prompt_length": 99})


def test_a_prompt_longer_than_the_model_reads_is_cut_with_a_warning(generators):
    extractor = attnviz.load(generators["gpt2-lm"])  # reads 64 tokens
    prompt = " ".join(["Hello"] * 80)
    with pytest.warns(attnviz.errors.AttnvizWarning) as warned:
        generation = extractor.generate(prompt, max_new_tokens=4, stop=False)
    assert len(warned) == 1 and "(4 of them for new tokens)" in str(warned[0].message)
    assert len(generation.maps.query_tokens) == 64
    with pytest.raises(UsageError, match="fewer than 64 new tokens"):
        extractor.generate(prompt, max_new_tokens=64)


@pytest.mark.parametrize(
    ("which", "message"),
    [("bert", "is an encoder"), ("gpt2", "no language-model head")],
)
def test_models_that_cannot_write_are_refused(tiny, which, message):
    with pytest.raises(UsageError, match=message):
        attnviz.load(tiny[which]).generate(PROMPT)


def test_temperature_or_top_p_without_sampling_are_refused(generators):
    extractor = attnviz.load(generators["gpt2-lm"])
    with pytest.raises(UsageError, match="top_p applies only when sampling, which is off"):
        extractor.generate(PROMPT, top_p=0.9)
    greedy = extractor.generate(PROMPT, max_new_tokens=3, seed=5)  # a seed changes nothing
    assert greedy.text == extractor.generate(PROMPT, max_new_tokens=3).text


def test_builtin_stack_does_not_generate():
    with pytest.raises(UsageError, match="does not generate"):
        attnviz.load().generate(PROMPT)


def test_interrupting_keeps_what_was_written(generators, monkeypatch):
    from attnviz.pretrained import generation as module

    calls = []
    original = module._Collector.put

    def put(self, value):
        original(self, value)
        calls.append(1)
        if len(calls) == 3:  # the prompt, then two tokens
            raise KeyboardInterrupt

    monkeypatch.setattr(module._Collector, "put", put)
    extractor = attnviz.load(generators["gpt2-lm"])
    with pytest.raises(GenerationInterrupted) as caught:
        extractor.generate(PROMPT, max_new_tokens=10, stop=False)
    monkeypatch.undo()
    whole = extractor.generate(PROMPT, max_new_tokens=2, stop=False).text
    assert caught.value.text == whole and caught.value.exit_code == 130


def test_a_loaded_model_is_read_as_the_same_model_loaded_by_name(generators):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = generators["llama-lm"]
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    wrapped = attnviz.load(model=model, tokenizer=tokenizer)
    by_name = attnviz.load(folder)
    np.testing.assert_array_equal(wrapped.extract(PROMPT).weights, by_name.extract(PROMPT).weights)
    assert wrapped.name == folder
    assert (
        wrapped.generate(PROMPT, max_new_tokens=3).text
        == by_name.generate(PROMPT, max_new_tokens=3).text
    )


def test_a_loaded_models_spec_gives_back_the_model_in_memory(generators):
    import pickle

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = generators["llama-lm"]
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    with torch.no_grad():  # changed since it was read from disk
        model.model.layers[0].self_attn.q_proj.weight.mul_(3.0)
    wrapped = attnviz.load(model=model, tokenizer=AutoTokenizer.from_pretrained(folder))
    again = wrapped.spec.load()
    assert again.loaded.model is model
    np.testing.assert_array_equal(again.extract(PROMPT).weights, wrapped.extract(PROMPT).weights)
    assert not np.allclose(
        attnviz.load(folder).extract(PROMPT).weights, wrapped.extract(PROMPT).weights
    )
    with pytest.raises(UsageError, match="handed over loaded, in this process's memory"):
        pickle.dumps(wrapped.spec)
    assert pickle.loads(pickle.dumps(attnviz.load(folder).spec)).model == folder


@pytest.mark.parametrize("recordable", [True, False])
def test_a_loaded_fused_model_is_read_exactly_and_left_as_it_was(
    generators, monkeypatch, recordable
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnviz.errors import AttnvizWarning
    from attnviz.pretrained import fused

    if not recordable:  # read through eager attention instead, switched on for the pass

        def unrecordable(*args):
            raise fused.Unrecordable("learned attention sinks")

        monkeypatch.setattr(fused, "scores_of", unrecordable)
    folder = generators["gpt2-lm"]
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    extractor = attnviz.load(model=model, tokenizer=tokenizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        maps = extractor.extract(PROMPT)
    assert any(w.category is AttnvizWarning for w in caught) is not recordable
    assert model.config._attn_implementation == "sdpa"  # switched for the pass, then back
    model.set_attn_implementation("eager")
    with torch.inference_mode():
        own = model(torch.tensor([tokenizer(PROMPT)["input_ids"]]), output_attentions=True)
    own_weights = torch.cat(own.attentions).numpy()
    np.testing.assert_allclose(maps.weights, own_weights, atol=model_tolerance(model.config))


def test_a_loaded_model_needs_its_fast_tokenizer(generators):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(generators["gpt2-lm"])
    with pytest.raises(UsageError, match="fast tokenizer"):
        attnviz.load(model=model, tokenizer=None)
    with pytest.raises(UsageError, match="not dict"):
        attnviz.load(model={}, tokenizer=None)


def test_generate_command_writes_the_text_and_the_maps(runner, generators, tmp_path):
    folder = generators["gpt2-lm"]
    data = runner.invoke(
        app, ["generate", "--model", folder, PROMPT, "-n", "3", "--no-stop", "-f", "json"]
    )
    assert data.exit_code == 0, data.stderr
    document = json.loads(data.stdout)
    assert document["prompt_length"] == 4 and len(document["query_tokens"]) == 7
    assert data.stderr.startswith(PROMPT) and "[length]" in data.stderr  # the text: stderr
    drawn = runner.invoke(
        app, ["generate", "--model", folder, PROMPT, "-n", "3", "--no-stop", "-f", "terminal",
              "-l", "0", "--head", "0", "--color", "never"],
    )  # fmt: skip
    assert drawn.exit_code == 0, drawn.stderr
    assert drawn.stdout.startswith(PROMPT) and drawn.stdout.count("▸") >= 3
    assert "3 generated (▸) after a 4-token prompt" in " ".join(drawn.stdout.split())
    picture = tmp_path / "g.png"
    saved = runner.invoke(
        app, ["generate", "--model", folder, PROMPT, "-n", "2", "-o", str(picture)]
    )
    assert saved.exit_code == 0 and picture.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["generate", "--model", "{bert}", PROMPT], "is an encoder"),
        (["generate", "--model", "{gpt2}", PROMPT, "--words"], "No such option: --words"),
        (["generate", "--model", "{gpt2}", PROMPT, "-m", "self"], "masked (causal) only"),
        (["generate", "--model", "{gpt2}", "  "], "the text is empty"),
        (["generate", "--model", "./absent", PROMPT, "--temperature", "0.7", "--top-p", "0.9"],
         "temperature and top_p apply only when sampling, which is off: add --sample"),
        (["generate", "--model", "./absent", PROMPT, "--temperature", "0.7"],
         "temperature applies only when sampling, which is off"),  # both before loading
    ],
)  # fmt: skip
def test_generate_refuses_what_it_cannot_do(runner, tiny, generators, arguments, message):
    names = {"bert": tiny["bert"], "gpt2": generators["gpt2-lm"]}
    result = runner.invoke(app, [argument.format(**names) for argument in arguments])
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_ctrl_c_in_the_generate_command_prints_what_was_written_and_exits_130(
    runner, generators, monkeypatch
):
    from attnviz.pretrained import generation as module

    calls = []
    original = module._Collector.put

    def put(self, value):
        original(self, value)
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(module._Collector, "put", put)
    command = ["generate", "--model", generators["gpt2-lm"], PROMPT, "-n", "9", "--no-stop"]
    result = runner.invoke(app, [*command, "-f", "terminal"])
    assert result.exit_code == 130
    assert result.stdout.startswith(PROMPT) and len(result.stdout.strip()) > len(PROMPT)
    assert result.stderr.strip() == "attnviz: error: interrupted while generating"
    calls.clear()
    into_data = runner.invoke(app, command)  # into a pipe: ndjson
    assert into_data.exit_code == 130
    assert into_data.stdout == ""  # stdout carries data: the written text is not data
    written, error = into_data.stderr.strip().splitlines()
    assert written.startswith(PROMPT) and len(written) > len(PROMPT)
    assert error == "attnviz: error: interrupted while generating"


def test_a_prompt_cut_to_the_models_length_is_shown_as_cut(runner, generators):
    words = [f"w{i}" for i in range(80)]  # more tokens than the tiny GPT-2's 64 positions
    prompt = " ".join(words)
    result = runner.invoke(
        app, ["generate", "--model", generators["gpt2-lm"], prompt, "-n", "4", "-f", "json"]
    )
    assert result.exit_code == 0, result.stderr
    warning, written = result.stderr.splitlines()
    assert "were dropped" in warning
    maps = json.loads(result.stdout)
    read = maps["query_tokens"][: maps["prompt_length"]]
    kept = prompt[: len("".join(read).replace("Ġ", " "))]
    assert kept and written.startswith(kept)  # the tokens the model read, then its own
    assert not written.startswith(prompt)


def test_heads_and_top_read_what_generate_saved(runner, generators, tmp_path):
    from attnviz.analysis.heads import head_statistics

    saved = tmp_path / "gen.json"
    made = runner.invoke(
        app, ["generate", "--model", generators["gpt2-lm"], PROMPT, "-n", "3", "-o", str(saved)]
    )
    assert made.exit_code == 0, made.stderr
    maps = attnviz.AttentionMaps.from_dict(json.loads(saved.read_text()))
    listed = runner.invoke(app, ["heads", "--from", str(saved), "-f", "json"])
    assert listed.exit_code == 0, listed.stderr
    rows = json.loads(listed.stdout)["heads"]
    expected = head_statistics(maps)
    assert [(r["layer"], r["head"]) for r in rows] == [(s.layer, s.head) for s in expected]
    assert [r["entropy"] for r in rows] == pytest.approx([s.entropy for s in expected])
    top = runner.invoke(app, ["top", "--from", str(saved), "-l", "1", "--head", "2", "-f", "json"])
    assert top.exit_code == 0 and json.loads(top.stdout)["maps"][0]["title"] == "layer 1 · head 2"
    both = runner.invoke(app, ["heads", PROMPT, "--from", str(saved)])
    assert both.exit_code == 2 and "one of them" in both.stderr


def test_generate_command_keeps_the_rows_asked_for(runner, generators):
    arguments = ["generate", PROMPT, "--model", generators["llama-lm"], "-n", "3", "--no-stop"]
    result = runner.invoke(app, [*arguments, "--rows", "last", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    written = len(attnviz.load(generators["llama-lm"]).loaded.tokenizer(PROMPT)["input_ids"]) + 3
    assert document["query_positions"] == [written - 1]
    assert np.asarray(document["weights"]).shape[-2:] == (1, written)
    refused = runner.invoke(app, [*arguments, "--rows", "last", "--pool", "4", "-f", "json"])
    assert refused.exit_code == 2 and "--rows" in refused.stderr and not refused.stdout
