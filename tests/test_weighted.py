"""Value-weighted maps (``--weigh value``): each weight times what its key writes through
the head, a_ij · ‖W_O^h v_j‖. Every family's maps equal an independent reference made from
the model's own eager ``output_attentions`` and the value vectors recorded by a forward
hook on its value projection, through the output projection's weight as the family names
it; fused equals eager; chosen rows and pooled bins equal those of the whole maps."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

import attnviz
from attnviz.analysis.grid import pool_map
from attnviz.cli import app
from attnviz.errors import SchemaError, UsageError
from attnviz.panels import panels_of
from attnviz.pretrained import LoadOptions

TEXT = "The man walked the dog and the animal didn't cross the street"
TARGET = "Bonjour je t'aime le chien"


def _gpt2_values(output, config):
    return output.split(config.n_embd, dim=2)[2]  # c_attn gives queries, keys and values


def _attribute(path: str):
    """``"a.b.0.c"`` -> a function reading that attribute path of a module."""

    def read(module):
        for part in path.split("."):
            module = module[int(part)] if part.isdigit() else getattr(module, part)
        return module

    return read


# family -> (mode, attentions field, the layers, in each layer the value projection and
# the output projection (its weight as (E_out, H·D) is read by hand), and how the value
# projection's output gives the values where it gives more than they)
FAMILIES = {
    "gpt2": ("masked", "attentions", "h", "attn.c_attn", "attn.c_proj", _gpt2_values),
    "llama": ("masked", "attentions", "layers", "self_attn.v_proj", "self_attn.o_proj", None),
    "gemma2": ("masked", "attentions", "layers", "self_attn.v_proj", "self_attn.o_proj", None),
    "gemma3": ("masked", "attentions", "layers", "self_attn.v_proj", "self_attn.o_proj", None),
    "bert": ("self", "attentions", "encoder.layer", "attention.self.value",
             "attention.output.dense", None),
    "t5": ("self", "encoder_attentions", "encoder.block", "layer.0.SelfAttention.v",
           "layer.0.SelfAttention.o", None),
    "bart": ("cross", "cross_attentions", "decoder.layers", "encoder_attn.v_proj",
             "encoder_attn.out_proj", None),
}  # fmt: skip


def _output_weight(projection) -> torch.Tensor:
    """(E_out, H·D): GPT-2's Conv1D keeps its weight the other way round."""
    weight = projection.weight.detach()
    return weight.T if type(projection).__name__ == "Conv1D" else weight


def _heads(config) -> tuple[int, int]:
    heads = getattr(config, "num_attention_heads", None) or config.num_heads
    if config.model_type == "bart":
        heads = config.decoder_attention_heads
    return heads, getattr(config, "num_key_value_heads", None) or heads


def reference(path: str, family: str) -> np.ndarray:
    """(L, H, T, S): the model's own eager weights times ‖W_O^h v_j‖ of hooked values."""
    _, field, layers_at, value_at, projection_at, values = FAMILIES[family]
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    inputs = {"input_ids": torch.tensor([tokenizer(TEXT)["input_ids"]])}
    if model.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = torch.tensor([tokenizer(text_target=TARGET)["input_ids"]])
    layers = _attribute(layers_at)(model)
    recorded: dict[int, torch.Tensor] = {}

    def keep(index: int, output: torch.Tensor) -> None:  # None: the output stays as it was
        recorded[index] = output if values is None else values(output, model.config)

    handles = [
        _attribute(value_at)(layer).register_forward_hook(lambda _m, _a, out, i=i: keep(i, out))
        for i, layer in enumerate(layers)
    ]
    with torch.no_grad():
        weights = getattr(model(**inputs, output_attentions=True), field)
    for handle in handles:
        handle.remove()
    heads, kv_heads = _heads(model.config)
    result = []
    for i, layer in enumerate(layers):
        value = recorded[i][0].view(recorded[i].shape[1], kv_heads, -1)  # (S, K, D)
        size = value.shape[-1]
        w_o = _output_weight(_attribute(projection_at)(layer))  # (E_out, H·D)
        group = heads // kv_heads
        norms = torch.stack(
            [
                (value[:, h // group] @ w_o[:, h * size : (h + 1) * size].T).norm(dim=-1)
                for h in range(heads)
            ]
        )  # (H, S)
        result.append(weights[i][0] * norms[:, None, :])
    return torch.stack(result).numpy()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_value_weighted_maps_are_weights_times_value_norms(tiny, family):
    mode = FAMILIES[family][0]
    expected = reference(tiny[family], family)
    target = TARGET if mode == "cross" else None
    fused = attnviz.load(tiny[family])
    maps = fused.extract(TEXT, mode=mode, target=target, weigh="value")
    assert maps.weighting == "value"
    np.testing.assert_allclose(maps.weights, expected, atol=1e-5, rtol=1e-5)
    assert abs(maps.weights.sum(-1) - 1).max() > 1e-2  # rows no longer sum to 1

    eager = attnviz.load(tiny[family], load_options=LoadOptions(attention="eager"))
    again = eager.extract(TEXT, mode=mode, target=target, weigh="value")
    np.testing.assert_allclose(again.weights, maps.weights, atol=1e-6, rtol=1e-6)

    last = fused.extract(TEXT, mode=mode, target=target, weigh="value", rows="last")
    np.testing.assert_allclose(last.weights, expected[:, :, -1:], atol=1e-5, rtol=1e-5)
    pooled = fused.extract(TEXT, mode=mode, target=target, weigh="value", pool=4)
    binned = np.array([[pool_map(m, pooled.pooled) for m in layer] for layer in expected])
    np.testing.assert_allclose(pooled.weights, binned, atol=1e-5, rtol=1e-5)


def test_the_builtin_stack_weighs_its_maps_by_its_own_value_norms():
    extractor = attnviz.load()
    for mode, target in (("self", None), ("masked", None), ("cross", "Bonjour le monde")):
        raw = extractor.extract(TEXT, mode=mode, target=target)
        weighted = extractor.extract(TEXT, mode=mode, target=target, weigh="value")
        # Each key's factor is the same in every row: weighted / raw is constant down a column.
        ratio = weighted.weights / np.where(raw.weights > 0, raw.weights, np.nan)
        spread = np.nanmax(ratio, axis=-2) - np.nanmin(ratio, axis=-2)
        assert np.nanmax(spread) < 1e-4
        assert weighted.weighting == "value"
    stack = extractor.stack
    attention = stack.encoder[0].attention
    x = stack.encoder[0].attention_norm(stack.embed(extractor.tokens(TEXT, "text")))
    size = attention.head_dim
    with torch.no_grad():
        v = attention.v_proj(x)[0].view(-1, attention.num_heads, size)  # (S, H, Dh)
        w_o = attention.out_proj.weight  # (D, H·Dh)
        by_hand = torch.stack(
            [
                (v[:, h] @ w_o[:, h * size : (h + 1) * size].T).norm(dim=-1)
                for h in range(attention.num_heads)
            ]
        )
    raw = extractor.extract(TEXT, layers=0).weights[0]
    weighted = extractor.extract(TEXT, layers=0, weigh="value").weights[0]
    np.testing.assert_allclose(weighted, raw * by_hand.numpy()[:, None, :], atol=1e-5)


def test_weighted_maps_keep_their_weighting_in_every_format(tmp_path):
    maps = attnviz.extract("Hello I love you", weigh="value")
    for suffix in ("json", "npz"):
        path = tmp_path / f"maps.{suffix}"
        maps.save(path)
        again = attnviz.AttentionMaps.read(path)
        assert again.weighting == "value"
        np.testing.assert_allclose(again.weights, maps.weights)
    document = maps.to_dict()
    assert document["weighting"] == "value"
    assert "weighting" not in attnviz.extract("Hello I love you").to_dict()
    for wrong, message in (("values", "value"), (-1.0, "0 or more")):
        changed = dict(document, weighting=wrong) if isinstance(wrong, str) else dict(
            document, weights=(np.asarray(document["weights"]) * wrong).tolist()
        )  # fmt: skip
        with pytest.raises(SchemaError, match=message):
            attnviz.AttentionMaps.from_dict(changed)


@pytest.mark.parametrize(
    "call",
    [
        lambda maps: maps.aggregated("rollout"),
        lambda maps: maps.head_statistics(),
    ],
)
def test_what_needs_rows_that_sum_to_one_refuses_weighted_maps(call):
    maps = attnviz.extract("Hello I love you", weigh="value")
    with pytest.raises(UsageError, match=r"value-weighted|--weigh"):
        call(maps)
    assert maps.aggregated("mean").weighting == "value"  # a mean of weighted maps is one too


def test_statistics_and_reshaped_tokens_refuse_a_weighing(tiny):
    with pytest.raises(UsageError, match="--weigh does not apply"):
        attnviz.load().head_statistics("Hello I love you", weigh="value")
    with pytest.raises(UsageError, match="--words renormalises"):
        attnviz.Request(weigh="value", words=True)
    with pytest.raises(UsageError, match="unknown weighting"):
        attnviz.Request(weigh="norm")


def test_show_writes_weighted_maps_and_says_so(runner):
    result = runner.invoke(app, ["show", "Hello I love you", "--weigh", "value", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["weighting"] == "value"
    drawn = runner.invoke(
        app, ["show", "Hello I love you", "--weigh", "value", "-f", "terminal", "--width", "120"]
    )
    assert drawn.exit_code == 0, drawn.stderr
    assert "value-weighted" in drawn.stdout
    assert "each row sums to 1" not in drawn.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["show", "x y", "--weigh", "value", "-a", "rollout"], "give --weigh or --aggregate"),
        (["show", "x y", "--weigh", "norm"], "norm"),
        (["heads", "x y", "--weigh", "value"], "No such option"),
        (["show", "x y", "--weigh", "value", "--top-heads", "2"], "--weigh"),
    ],
)
def test_weighing_usage_errors_exit_2(runner, arguments, message):
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_pictures_of_weighted_maps_scale_colours_to_their_largest_value():
    from attnviz.render.grid_canvas import GridCanvas
    from attnviz.render.layout import grid_shape
    from attnviz.render.page import page_data
    from attnviz.render.style import Style, cell_text
    from attnviz.render.terminal import format_weight

    maps = attnviz.extract("Hello I love you", weigh="value")
    largest = float(maps.weights.max())
    style = Style(vmax=0.5).for_maps(maps)
    assert style.top == pytest.approx(0.5 * largest) and style.weighted
    assert style.bar_label.startswith("weight × ‖W_O v‖ (≥")
    assert Style().for_maps(attnviz.extract("Hello I love you")) == Style()
    assert "vmax" in Style().chosen() and "scale" not in Style().chosen()
    canvas = GridCanvas(grid_shape(maps, None), style)
    figure = canvas.whole(maps, list(panels_of(maps)))
    figure.canvas.draw()
    assert "value-weighted" in canvas.header.get_text()
    renderer = figure.canvas.get_renderer()
    assert canvas.header.get_window_extent(renderer).width <= figure.bbox.width  # fitted
    data = page_data(maps)
    assert data["scale"] == pytest.approx(largest) and not data["rowsAreDistributions"]
    assert all(panel["kind"] != "rollout" for panel in data["maps"])
    assert [cell_text(w) for w in (0.42, 1.0, 2.44, 13.2)] == [".42", "1.0", "2.4", "13"]
    assert [format_weight(w) for w in (0.42, 1.0, 2.44, 13.2)] == [".42", "1.0", "2.4", "13"]


def test_generate_and_batch_weigh_their_maps(runner, generators, tmp_path):
    folder = generators["gpt2-lm"]
    made = runner.invoke(
        app, ["generate", "--model", folder, "The man walked", "-n", "2", "--no-stop",
              "--weigh", "value", "-f", "json"],
    )  # fmt: skip
    assert made.exit_code == 0, made.stderr
    document = json.loads(made.stdout)
    assert document["weighting"] == "value" and document["prompt_length"] is not None
    source = tmp_path / "in.txt"
    source.write_text("Hello I love you\nthe cat sat\n")
    out = tmp_path / "out"
    ran = runner.invoke(
        app, ["batch", str(source), "-o", str(out), "-f", "json", "--weigh", "value"]
    )
    assert ran.exit_code == 0, ran.stderr
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert {record["request"]["weigh"] for record in records} == {"value"}
    written = sorted(out.glob("*.json"))
    assert [json.loads(path.read_text())["weighting"] for path in written] == ["value"] * 2
