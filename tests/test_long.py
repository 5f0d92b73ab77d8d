"""Long inputs: the model runs its own fused attention and attnviz computes the weights
asked for from its queries and keys, block by block. Every product equals the same
product of the model's own eager ``output_attentions``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

import attnviz
from attnviz.analysis.grid import pool_map
from attnviz.analysis.heads import head_statistics, statistics_rows
from attnviz.analysis.products import Block, HeadStatisticsProduct
from attnviz.cli import app
from attnviz.cli.declarations import AUTO_POOL
from attnviz.cli.settings import MapProducts, ModelSettings
from attnviz.errors import AttnvizWarning, UsageError
from attnviz.pretrained import LoadOptions
from attnviz.pretrained import fused as fused_module
from tests.checks import model_tolerance

TEXT = "The man walked the dog and the animal didn't cross the street"
TARGET = "Bonjour je t'aime le chien"

CASES = [
    ("bert", "self", "attentions"),
    ("gpt2", "masked", "attentions"),
    ("llama", "masked", "attentions"),  # grouped-query heads
    ("bart", "self", "encoder_attentions"),
    ("bart", "masked", "decoder_attentions"),
    ("bart", "cross", "cross_attentions"),
    ("t5", "self", "encoder_attentions"),  # relative position bias
    ("t5", "masked", "decoder_attentions"),
    ("t5", "cross", "cross_attentions"),
    ("mistral", "masked", "attentions"),  # a sliding window of 4
    ("gemma2", "masked", "attentions"),  # logit soft-capping, sliding and global layers
    ("gemma3", "masked", "attentions"),  # layer types: each layer's own mask (window 4)
]


def eager_attentions(path: str, family: str, field: str) -> np.ndarray:
    """(L, H, T, S) from the model's own eager attention, through transformers' public API."""
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    inputs = {"input_ids": torch.tensor([tokenizer(TEXT)["input_ids"]])}
    if model.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = torch.tensor([tokenizer(text_target=TARGET)["input_ids"]])
    with torch.no_grad():
        output = model(**inputs, output_attentions=True)
    return torch.stack([layer[0] for layer in getattr(output, field)]).numpy()


@pytest.fixture(scope="module")
def references(tiny):
    return {
        (family, field): eager_attentions(tiny[family], family, field) for family, _, field in CASES
    }


def block_memory(rows: int | None, keys: int) -> int:
    """The memory budget that makes blocks of ``rows`` query rows (None: every row at once)."""
    return 10**9 if rows is None else rows * keys * 4 * fused_module._COPIES_PER_BLOCK


@pytest.mark.slow
@pytest.mark.parametrize("rows_per_block", [1, 7, None])
@pytest.mark.parametrize(("family", "mode", "field"), CASES)
def test_every_product_equals_the_same_product_of_eager_attention(
    tiny, references, blocks, family, mode, field, rows_per_block
):
    expected = references[(family, field)]  # (L, H, T, S)
    keys = expected.shape[-1]
    options = LoadOptions(memory=block_memory(rows_per_block, keys))
    extractor = attnviz.load(tiny[family], load_options=options)
    tolerance = model_tolerance(extractor.loaded.model.config)
    target = TARGET if family in ("bart", "t5") and mode != "self" else None

    whole = extractor.extract(TEXT, mode=mode, target=target)
    np.testing.assert_allclose(whole.weights, expected, atol=tolerance, rtol=0)
    assert max(blocks) == min(rows_per_block or expected.shape[-2], expected.shape[-2])

    last = extractor.extract(TEXT, mode=mode, target=target, rows="last")
    np.testing.assert_allclose(last.weights, expected[:, :, -1:], atol=tolerance, rtol=0)
    assert last.query_positions == [expected.shape[-2] - 1]

    some = extractor.extract(TEXT, mode=mode, target=target, rows="1-3,0")
    np.testing.assert_allclose(some.weights, expected[:, :, [0, 1, 2, 3]], atol=tolerance, rtol=0)
    assert some.query_tokens == [whole.query_tokens[i] for i in range(4)]

    pooled = extractor.extract(TEXT, mode=mode, target=target, pool=4)
    factor = pooled.pooled
    assert factor == -(-max(expected.shape[-2:]) // 4)
    reference = np.array([[pool_map(m, factor) for m in layer] for layer in expected])
    np.testing.assert_allclose(pooled.weights, reference, atol=tolerance, rtol=0)
    np.testing.assert_allclose(pooled.weights.sum(-1), 1, atol=1e-5)
    assert pooled.query_tokens == whole.query_tokens[::factor]


def test_only_the_heads_and_layers_asked_for_are_computed(tiny, blocks):
    maps = attnviz.extract(TEXT, model=tiny["llama"], layers=1, heads="0,3")
    assert maps.weights.shape[:2] == (1, 2)
    assert len(blocks) == 2  # one block per head, of one layer


def test_chosen_rows_of_a_batch_are_each_inputs_own(tiny):
    extractor = attnviz.load(tiny["gpt2"])
    texts = ["Hello I love you", TEXT]
    batch = [found.maps for found in extractor.run(texts, rows="last", batch_size=2)]
    for text, maps in zip(texts, batch, strict=True):
        alone = extractor.extract(text)
        np.testing.assert_allclose(maps.weights, alone.weights[:, :, -1:], atol=1e-6)
        assert maps.query_positions == [len(alone.query_tokens) - 1]


def test_eager_attention_gives_the_same_products(tiny):
    fused = attnviz.load(tiny["llama"]).extract(TEXT, pool=3)
    eager = attnviz.load(tiny["llama"], load_options=LoadOptions(attention="eager"))
    np.testing.assert_allclose(eager.extract(TEXT, pool=3).weights, fused.weights, atol=1e-6)


def test_the_builtin_stack_makes_the_same_products_from_its_whole_maps():
    extractor = attnviz.load()
    whole = extractor.extract(TEXT, mode="masked")
    last = extractor.extract(TEXT, mode="masked", rows="last")
    np.testing.assert_array_equal(last.weights, whole.weights[:, :, -1:])
    pooled = extractor.extract(TEXT, mode="masked", pool=2)
    np.testing.assert_allclose(
        pooled.weights[0, 0], pool_map(whole.weights[0, 0], pooled.pooled), atol=1e-6
    )


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"rows": "last", "pool": 8}, "give one of them"),
        ({"pool": 1}, "at least 2"),
        ({"pool": "8"}, "at least 2"),
        ({"rows": "text: "}, "--rows names tokens by position or by a text, not an empty one"),
        ({"rows": 1.5}, "rows are chosen by index"),
        ({"span": ""}, "--span names tokens by position or by a text, not an empty one"),
        ({"span": [0, True]}, "a span list holds integer indexes"),
        ({"span": "3", "pool": 8}, "--span is scored on exact rows"),
        ({"span": "the dog", "special": False}, "--no-special reshapes whole maps"),
        ({"rows": "last", "words": True}, "--words reshapes whole maps"),
        ({"pool": 8, "special": False}, "--no-special reshapes whole maps"),
    ],
)
def test_malformed_products_are_usage_errors(request_fields, message):
    with pytest.raises(UsageError, match=message):
        attnviz.Request(**request_fields)


def test_rows_outside_the_text_are_usage_errors(tiny):
    count = len(attnviz.extract(TEXT, model=tiny["gpt2"]).key_tokens)
    with pytest.raises(
        UsageError, match=f"row 99 is out of range: there are {count} query"
    ) as raised:
        attnviz.extract(TEXT, model=tiny["gpt2"], rows=99)
    assert "text:" not in str(raised.value)  # given as a number, not as something to read
    # Written as a string, a number may be a year or a code that the user meant to find.
    meant = f"there are {count} key tokens .*; for the text '7421', write text:7421$"
    with pytest.raises(UsageError, match=meant):
        attnviz.extract(TEXT, model=tiny["gpt2"], span="7421")
    with pytest.raises(UsageError, match="--span 'a cat' is not in the text"):
        attnviz.extract(TEXT, model=tiny["gpt2"], span="a cat")


@pytest.mark.parametrize("model", ["gpt2", "bert", None])
def test_rows_and_span_given_as_text_are_the_tokens_that_cover_it(tiny, model):
    extractor = attnviz.load(tiny[model]) if model else attnviz.load()
    whole = extractor.extract(TEXT)
    found = extractor.extract(TEXT, rows="the animal", span="walked the dog")
    tokens = "".join(whole.query_tokens).lower()
    assert "".join(found.query_tokens).replace(" ", "").lower() in ("theanimal", "animal")
    assert "walked" in "".join(whole.key_tokens[i] for i in found.span).lower()
    assert "dog" in "".join(whole.key_tokens[i] for i in found.span).lower()
    assert found.span == list(range(found.span[0], found.span[-1] + 1))  # one run of keys
    positions = found.query_positions
    np.testing.assert_allclose(found.weights, whole.weights[:, :, positions], atol=1e-6)
    assert tokens  # the text was read
    again = extractor.extract(TEXT, rows=positions, span=found.span)  # the same, as indices
    assert (again.query_positions, again.span) == (positions, found.span)
    forced = extractor.extract("a 2024 b 2024", rows="text:2024")  # reads like an index
    assert len(forced.query_positions) >= 1


@pytest.mark.parametrize(("family", "mode"), [("llama", "masked"), ("bert", "self")])
def test_span_statistic_is_the_weight_on_the_span_from_the_rows_read(tiny, blocks, family, mode):
    extractor = attnviz.load(tiny[family])
    whole = extractor.extract(TEXT, mode=mode)
    table = extractor.head_statistics(TEXT, mode=mode, rows="-3--1", span="walked the dog")
    assert blocks  # read from the model's fused attention
    span, rows = table.span, table.query_positions
    assert rows == [len(whole.query_tokens) - i for i in (3, 2, 1)]
    expected = whole.weights[:, :, rows][..., span].sum(-1).mean(-1)  # (L, H)
    got = np.array([row.span for row in table.rows]).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    entropy = -(whole.weights[:, :, rows] * np.log(whole.weights[:, :, rows] + 1e-30)).sum(-1)
    np.testing.assert_allclose(
        [row.entropy for row in table.rows], entropy.mean(-1).reshape(-1), atol=1e-5
    )
    # the same numbers from maps that hold those rows and the span, as heads --from reads them
    kept = extractor.extract(TEXT, mode=mode, rows="-3--1", span="walked the dog")
    assert [row.span for row in head_statistics(kept)] == pytest.approx(got.reshape(-1), abs=1e-6)


def test_heads_lists_and_ranks_a_span_and_show_draws_the_top_heads_by_it(runner, tiny):
    arguments = ["--model", tiny["llama"], "--rows", "last", "--span", "the dog"]
    listed = runner.invoke(app, ["heads", TEXT, *arguments, "--sort", "span", "-f", "csv"])
    assert listed.exit_code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    columns = lines[0].split(",")
    assert columns[:2] == ["layer", "head"] and "span" in columns
    spans = [float(line.split(",")[columns.index("span")]) for line in lines[1:]]
    assert spans == sorted(spans, reverse=True) and len(spans) == 2 * 4  # layers × heads
    plain = runner.invoke(app, ["heads", TEXT, "--model", tiny["llama"], "-f", "csv"])
    assert "span" not in plain.stdout.splitlines()[0]
    shown = runner.invoke(
        app, ["show", TEXT, *arguments, "--top-heads", "2", "--by", "span", "--color", "never"]
    )
    assert shown.exit_code == 0, shown.stderr
    titles = [line for line in shown.stdout.splitlines() if "╭" in line]
    assert len(titles) == 2 and f"span {spans[0]:.3f}" in titles[0], shown.stdout
    unranked = ["show", TEXT, "--model", tiny["llama"], "--top-heads", "2", "--by", "span"]
    refused = runner.invoke(app, unranked)
    assert refused.exit_code == 2 and "give --span" in refused.stderr


def test_products_round_trip_through_saved_documents(tiny, tmp_path):
    maps = attnviz.extract(TEXT, model=tiny["gpt2"], rows="0,-1")
    for suffix in ("json", "npz"):
        path = tmp_path / f"maps.{suffix}"
        maps.save(path)
        again = attnviz.AttentionMaps.read(path)
        assert again.query_positions == maps.query_positions
        np.testing.assert_allclose(again.weights, maps.weights)
    pooled = attnviz.extract(TEXT, model=tiny["gpt2"], pool=4)
    pooled.save(tmp_path / "pooled.json")
    assert attnviz.AttentionMaps.read(tmp_path / "pooled.json").pooled == pooled.pooled


# The command line.


def test_show_writes_the_last_row_of_a_pretrained_model(runner, tiny):
    arguments = ["show", TEXT, "--model", tiny["llama"], "--rows", "last", "-f", "json"]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    whole = attnviz.extract(TEXT, model=tiny["llama"])
    assert document["query_positions"] == [len(whole.query_tokens) - 1]
    np.testing.assert_allclose(document["weights"], whole.weights[:, :, -1:], atol=1e-6)


@pytest.mark.parametrize(
    "chosen",
    [["--rows", "last"], ["--pair", "the dog slept", "--between", "a-b"]],
)
def test_the_page_of_chosen_rows_has_no_rollout_and_is_written(runner, tiny, tmp_path, chosen):
    """Rollout needs every token's row over every token: the page of maps that hold
    chosen rows (or one sentence's over the other's) leaves it out instead of failing."""
    page = tmp_path / "page.html"
    arguments = ["export", TEXT, "--model", tiny["bert"], *chosen, "-o", str(page)]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    assert '"rollout"' not in page.read_text() and '"mean"' in page.read_text()
    whole = tmp_path / "whole.html"
    result = runner.invoke(app, ["export", TEXT, "--model", tiny["bert"], "-o", str(whole)])
    assert result.exit_code == 0 and '"rollout"' in whole.read_text()


def test_show_draws_pooled_maps_and_says_so(runner, tiny):
    result = runner.invoke(
        app,
        [
            "show",
            TEXT,
            "--model",
            tiny["gpt2"],
            "--pool",
            "4",
            "--layer",
            "0",
            "--head",
            "0",
            "--view",
            "panels",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "4 tokens per bin (rows averaged, columns summed)" in " ".join(result.stdout.split())


def test_eager_and_fused_attention_agree_on_the_command_line(runner, tiny):
    outputs = []
    for attention in ("eager", "fused"):
        arguments = ["show", TEXT, "--model", tiny["bert"], "--attention", attention, "-f", "json"]
        result = runner.invoke(app, [*arguments, "--memory", "1M"])
        assert result.exit_code == 0, result.stderr
        outputs.append(np.array(json.loads(result.stdout)["weights"]))
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-6)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--attention", "eager"],
            "--attention applies to pretrained models (--model), not the built-in stack",
        ),
        (["--memory", "1G"], "--memory applies to pretrained models"),
        (["--rows", "last", "--pool", "8"], "give one of them"),
        (["--rows", "the end"], "--rows 'the end' is not in the text"),
        (["--span", "cat"], "--span 'cat' is not in the text"),
        (["--span", "dog", "--pool", "4"], "--span is scored on exact rows"),
        (["--pool", "1"], "--pool takes a number of bins of at least 2"),
    ],
)
def test_bad_long_input_options_are_one_line_usage_errors(runner, arguments, message):
    result = runner.invoke(app, ["show", TEXT, *arguments])
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.parametrize("kept", [["--rows", "last"], ["--pool", "2"]])
@pytest.mark.parametrize("command", ["show", "export", "generate", "batch"])
@pytest.mark.parametrize("method", ["rollout", "flow"])
def test_rollout_of_chosen_rows_is_refused_before_a_model_loads(
    runner, tmp_path, command, method, kept
):
    """Every input would fail the same way: refused at once, one line, nothing written (a
    model that is not there shows that nothing was loaded)."""
    source = tmp_path / "in.txt"
    source.write_text(TEXT + "\n")
    out = tmp_path / "out"
    where = {
        "show": [TEXT, "-f", "json"],
        "export": [TEXT, "-o", str(out / "a.png")],
        "generate": [TEXT],
        "batch": [str(source), "-o", str(out), "-f", "json"],
    }[command]
    missing = str(tmp_path / "no-model-here")
    arguments = [command, *where, "--model", missing, *kept, "-a", method]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1
    assert f"{method} chains a layer's queries" in result.stderr
    said = "--rows keeps chosen rows" if kept[0] == "--rows" else "--pool keeps pooled bins"
    assert said in result.stderr and not out.exists()


def test_rollout_of_saved_pooled_maps_is_refused_and_a_long_picture_is_not_pooled_first(
    runner, tmp_path
):
    """The rollout of pooled bins is not the pooled rollout (0.09 off on MiniLM): refused
    of saved bins; a picture of a long input's rollout chains its whole maps."""
    saved = tmp_path / "pooled.json"
    saved.write_text(runner.invoke(app, ["show", TEXT, "--pool", "2", "-f", "json"]).stdout)
    result = runner.invoke(app, ["render", str(saved), "-a", "rollout"])
    assert result.exit_code == 2 and "these maps hold pooled bins" in result.stderr
    # A picture pools a long input by itself, but not for a rollout: it chains whole maps.
    from attnviz.choices import Aggregate
    from attnviz.cli.settings import DEFAULT_SETTINGS, NO_PRODUCTS

    assert NO_PRODUCTS.drawn(DEFAULT_SETTINGS).pool is not None
    assert NO_PRODUCTS.drawn(DEFAULT_SETTINGS, Aggregate.ROLLOUT).pool is None


@pytest.mark.parametrize("size", ["lots", "10", "0.5K"])
def test_a_memory_budget_must_be_a_size(runner, tiny, size):
    result = runner.invoke(app, ["show", TEXT, "--model", tiny["bert"], "--memory", size])
    assert result.exit_code == 2
    assert "--memory takes a size of at least 1M" in result.stderr


def test_pictures_pool_long_inputs_by_themselves_unless_told():
    settings = ModelSettings()
    assert MapProducts().drawn(settings).pool == AUTO_POOL
    assert MapProducts(rows="last").drawn(settings) == MapProducts(rows="last")
    assert MapProducts().drawn(ModelSettings(words=True)) == MapProducts()


def test_attention_that_cannot_be_followed_falls_back_to_eager_with_a_warning(tiny, monkeypatch):
    def unrecordable(*args):
        raise fused_module.Unrecordable("learned attention sinks")

    monkeypatch.setattr(fused_module, "scores_of", unrecordable)
    extractor = attnviz.load(tiny["llama"])
    with pytest.warns(AttnvizWarning, match="learned attention sinks.*eager attention"):
        maps = extractor.extract(TEXT)
    np.testing.assert_allclose(maps.weights.sum(-1), 1, atol=1e-5)
    with pytest.warns(AttnvizWarning, match="eager attention"):  # products of the eager maps
        last = extractor.extract(TEXT, rows="last")
        pooled = extractor.extract(TEXT, pool=3)
        table = extractor.head_statistics(TEXT)
    np.testing.assert_allclose(last.weights, maps.weights[:, :, -1:], atol=1e-6)
    assert pooled.pooled and pooled.weights.shape[-1] == 3
    assert [row.entropy for row in table.rows] == pytest.approx(
        [row.entropy for row in head_statistics(maps)], abs=1e-6
    )
    explicit = attnviz.load(tiny["llama"], load_options=LoadOptions(attention="fused"))
    with pytest.raises(UsageError, match="--attention fused cannot read"):
        explicit.extract(TEXT)


def independent_statistics(matrix: np.ndarray, sink_columns: list[int], aligned: bool) -> dict:
    """The statistics of one (T, S) map, written out directly from their definitions."""
    queries, keys = matrix.shape
    matrix = matrix.astype(np.float64)
    logs = np.log(matrix, out=np.zeros_like(matrix), where=matrix > 0)
    distance = np.abs(np.arange(queries)[:, None] - np.arange(keys)[None, :])
    return {
        "entropy": -(matrix * logs).sum(-1).mean(),
        "sink": matrix[:, sink_columns].sum(-1).mean(),
        "distance": (matrix * distance).sum(-1).mean() if aligned else None,
        "previous": np.diagonal(matrix, -1).mean() if aligned else None,
        "self": np.diagonal(matrix).mean() if aligned else None,
        "top": int(matrix.sum(0).argmax()),
    }


@pytest.mark.parametrize("step", [1, 7, 1000])
@pytest.mark.parametrize(("aligned", "causal"), [(True, False), (True, True), (False, False)])
def test_head_statistics_summed_block_by_block_equal_their_definitions(step, aligned, causal):
    rng = np.random.default_rng(step)
    weights = rng.random((3, 20, 20 if aligned else 13)).astype(np.float32)
    if causal:
        weights = np.tril(weights)
    weights /= weights.sum(-1, keepdims=True)
    product = HeadStatisticsProduct(3, 20, weights.shape[-1], [0, 5], aligned, causal)
    for head, matrix in enumerate(weights):
        for rows in product.blocks(20, step):
            width = rows[-1] + 1 if causal else matrix.shape[1]  # as causal blocks come
            product.add(head, Block(rows, matrix[rows, :width]))
    tokens = [f"t{i}" for i in range(weights.shape[-1])]
    rows = statistics_rows(product.result()[None], [4], [0, 1, 2], tokens)
    for row, matrix in zip(rows, weights, strict=True):
        expected = independent_statistics(matrix, [0, 5], aligned)
        for name in ("entropy", "sink", "distance", "previous", "self"):
            got, want = getattr(row, name), expected[name]
            assert (got is None) == (want is None)
            if want is not None:
                assert got == pytest.approx(want, rel=1e-6, abs=1e-9)
        assert row.top_key == tokens[expected["top"]]


@pytest.mark.parametrize(
    ("family", "mode"),
    [("llama", "masked"), ("bert", "self"), ("t5", "cross"), ("mistral", "masked"),
     ("gemma3", "masked")],  # sliding windows: blocks that hold only the keys they read
)  # fmt: skip
def test_statistics_of_fused_attention_equal_those_of_the_whole_maps(tiny, blocks, family, mode):
    target = TARGET if mode == "cross" else None
    small = LoadOptions(memory=1)  # one row to a block
    fused = attnviz.load(tiny[family], load_options=small).head_statistics(
        TEXT, mode=mode, target=target
    )
    assert blocks and max(blocks) == 1  # summed row by row
    eager = attnviz.load(tiny[family], load_options=LoadOptions(attention="eager"))
    maps = eager.extract(TEXT, mode=mode, target=target)
    assert fused.key_count == len(maps.key_tokens)
    for got, want in zip(fused.rows, head_statistics(maps), strict=True):
        assert (got.layer, got.head, got.top_key) == (want.layer, want.head, want.top_key)
        for name in ("entropy", "distance", "sink", "previous", "self", "previous_token",
                     "duplicate_token", "induction"):  # fmt: skip
            if getattr(want, name) is None:
                assert getattr(got, name) is None
            else:
                assert getattr(got, name) == pytest.approx(getattr(want, name), abs=1e-5)


def test_heads_on_the_command_line_reads_fused_statistics(runner, tiny):
    result = runner.invoke(app, ["heads", TEXT, "--model", tiny["llama"], "-f", "json"])
    assert result.exit_code == 0, result.stderr
    listed = json.loads(result.stdout)["heads"]
    maps = attnviz.load(tiny["llama"], load_options=LoadOptions(attention="eager")).extract(TEXT)
    expected = {(row.layer, row.head): row.entropy for row in head_statistics(maps)}
    assert len(listed) == len(expected)
    for row in listed:
        assert row["entropy"] == pytest.approx(expected[row["layer"], row["head"]], abs=1e-5)


@pytest.mark.parametrize(("family", "mode"), [("llama", "masked"), ("bart", "cross")])
def test_statistics_of_a_padded_batch_equal_each_input_alone(tiny, blocks, family, mode):
    texts = [TEXT, "a short one", TEXT + " and then some more words"]
    items = [(text, TARGET if mode == "cross" else None) for text in texts]
    extractor = attnviz.load(tiny[family])
    batched = [
        found.statistics
        for found in extractor.run(items, mode=mode, batch_size=3, statistics=True, maps=False)
    ]
    assert blocks  # computed block by block
    eager = attnviz.load(tiny[family], load_options=LoadOptions(attention="eager"))
    for table, (text, target) in zip(batched, items, strict=True):
        alone = eager.head_statistics(text, mode=mode, target=target)
        assert table.key_count == alone.key_count
        for got, want in zip(table.rows, alone.rows, strict=True):
            assert (got.top_key_position, got.top_key) == (want.top_key_position, want.top_key)
            for name in ("entropy", "distance", "sink", "previous", "self"):
                expected = getattr(want, name)
                assert getattr(got, name) == (
                    None if expected is None else pytest.approx(expected, abs=1e-5)
                )


def test_stats_of_a_pretrained_model_reads_fused_statistics(runner, tiny, blocks, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"{TEXT}\na short one\n")
    arguments = ["stats", str(corpus), "--model", tiny["llama"], "-f", "json", "-q"]
    fused = runner.invoke(app, arguments)
    assert fused.exit_code == 0, fused.stderr
    assert blocks
    eager = runner.invoke(app, [*arguments, "--attention", "eager"])
    assert eager.exit_code == 0, eager.stderr
    got, want = json.loads(fused.stdout)["heads"], json.loads(eager.stdout)["heads"]
    assert [(r["layer"], r["head"], r["statistic"]) for r in got] == [
        (r["layer"], r["head"], r["statistic"]) for r in want
    ]
    for row, expected in zip(got, want, strict=True):
        assert row["mean"] == pytest.approx(expected["mean"], abs=1e-5)


def test_a_block_behind_a_sliding_window_computes_only_the_keys_its_rows_can_read(monkeypatch):
    """Rows far past a window of 4 read 4 keys each; the scores of the keys before the
    first one any row reads, and after the last (a causal mask's), are never computed,
    and the weights equal a softmax over every key with the mask applied (bool and
    additive masks alike)."""
    torch.manual_seed(0)
    query, key = torch.randn(1, 1, 20, 8), torch.randn(1, 1, 20, 8)
    distance = torch.arange(20)[:, None] - torch.arange(20)[None, :]
    allowed = (distance >= 0) & (distance < 4)  # (T, S)
    lowest = torch.finfo(torch.float32).min
    additive = torch.zeros(20, 20).masked_fill(~allowed, lowest)
    expected = ((query[0, 0] @ key[0, 0].T) * 0.5).masked_fill(~allowed, -torch.inf).softmax(-1)
    seen = []
    real = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: seen.append(b.shape) or real(a, b))
    rows = np.arange(12, 15)
    for mask in (allowed, additive):
        scores = fused_module.Scores(query, key, mask[None, None], causal=False, scaling=0.5)
        block = scores.block(0, 0, rows, keys=20)
        assert block.width == 15  # the keys after it hold weight 0
        np.testing.assert_allclose(block.array(), expected[12:15, :15].numpy(), atol=1e-6)
        assert expected[12:15, 15:].max() == 0
        assert block.array()[:, :9].max() == 0 and np.isfinite(block.logs.numpy()).all()
    assert seen == [(8, 6), (8, 6)]  # keys 9 to 14: row 12 reads from 9, row 14 up to 14
    assert fused_module._visible(allowed[12:15]) == (9, 15)
    blind = allowed[12:15].clone()
    blind[1] = False  # a row that may read nothing: uniform over every key, so all are made
    assert fused_module._visible(blind) == (0, 20)
