"""`attnviz trace`: for every layer and position, how much of the answer comes back when
the clean run's activation is restored in the corrupted run; its numbers held to a
reference from plain transformers hooks (tests/hook_references.py), its table, data,
picture and page, and its usage errors. The gradient estimate of a trace is held with
the other estimates in tests/test_patching.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers

import attnviz
from attnviz.cli import app
from attnviz.inputs import Input
from attnviz.request import Request
from tests.checks import model_tolerance, open_page, page_errors
from tests.hook_references import (
    ANSWER,
    CORRUPT,
    FAMILIES,
    TEXT,
    VERSUS,
    prepared,
    reference_pattern_trace,
    reference_trace,
)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("site", ["resid", "attn", "resid_mid", "mlp", "resid_post"])
def test_trace_equals_a_hook_restoring_each_layer_and_position(
    generators, language_models, family, site
):
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus=site == "attn"
    )
    given = Input(TEXT, answer=ANSWER, versus=VERSUS if site == "attn" else None, corrupt=CORRUPT)
    (found,) = extractor.run([given], Request(maps=False, trace=site))
    expected = reference_trace(model, clean_ids, corrupt_ids, answer_id, versus_id, site)
    assert found.trace.axes == ("layer", "position")
    np.testing.assert_allclose(found.trace.effect, expected, atol=1e-5)
    assert len(found.trace.tokens) == clean_ids.shape[1] == len(found.trace.corrupt_tokens)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("site", ["q", "k", "v", "z"])
@pytest.mark.parametrize("by_position", [False, True])
def test_a_heads_site_equals_a_hook_restoring_each_head(
    generators, language_models, family, site, by_position
):
    """Each head's slice of the projection's output (q, k, v: Llama's grouped key/value
    heads are fewer) or of the output projection's input (z), restored at every position
    or at one; z at every position is heads --corrupt's patch."""
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus=True
    )
    given = Input(TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT)
    (found,) = extractor.run([given], Request(maps=False, trace=site, by_position=by_position))
    expected = reference_trace(
        model, clean_ids, corrupt_ids, answer_id, versus_id, site, by_position=by_position
    )
    assert found.trace.effect.shape == expected.shape
    assert found.trace.axes == ("layer", "head", "position")[: 3 if by_position else 2]
    np.testing.assert_allclose(found.trace.effect, expected, atol=1e-5)
    if site == "z" and not by_position:
        patch = extractor.head_effects(TEXT, ANSWER, versus=VERSUS, corrupt=CORRUPT).patch
        np.testing.assert_allclose(found.trace.effect, patch, atol=1e-5)


@pytest.mark.parametrize("family", [*FAMILIES, "gemma3-lm"])
@pytest.mark.parametrize("by_position", [False, True])
def test_a_heads_pattern_equals_its_weights_put_into_eager_attention(
    generators, language_models, family, by_position
):
    """A head's clean attention weights (at every query row, or one row at a time) put
    into the corrupted run's own eager attention, its softmax's output replaced: no
    module holds them, and attnviz restores them through the head's output, z = A v."""
    extractor, model, (clean_ids, corrupt_ids), answer_id, versus_id = prepared(
        generators, language_models, family, versus=True
    )
    given = Input(TEXT, answer=ANSWER, versus=VERSUS, corrupt=CORRUPT)
    request = Request(maps=False, trace="pattern", by_position=by_position)
    (found,) = extractor.run([given], request)
    expected = reference_pattern_trace(
        model, clean_ids, corrupt_ids, answer_id, versus_id, by_position=by_position
    )
    assert found.trace.effect.shape == expected.shape
    # The tiny models' weights are near uniform: their effects are 1e-4 or less, so the
    # tolerance is float32's rounding through the model, which they exceed tenfold.
    tolerance = model_tolerance(model.config)
    assert np.abs(expected).max() > 10 * tolerance
    np.testing.assert_allclose(found.trace.effect, expected, atol=tolerance)


def test_trace_draws_a_layers_by_tokens_map_and_writes_data(runner, generators, tmp_path):
    from transformers import AutoConfig

    path = generators["gpt2-lm"]
    common = ["trace", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", CORRUPT]
    drawn = runner.invoke(app, [*common, "--width", "100"])
    assert drawn.exit_code == 0, drawn.stderr
    assert "resid" in drawn.stdout and "␣dog" in drawn.stdout and "layer 1" in drawn.stdout
    data = runner.invoke(app, [*common, "--site", "mlp", "-f", "json"])
    document = json.loads(data.stdout)
    layers = AutoConfig.from_pretrained(path).n_layer
    assert document["site"] == "mlp" and document["layers"] == list(range(layers))
    assert len(document["effect"]) == layers
    assert len(document["effect"][0]) == len(document["tokens"]) == 6
    rows = runner.invoke(app, [*common, "-f", "csv"]).stdout.splitlines()
    assert rows[0].startswith("layer,position,token,corrupt_token,effect")
    assert len(rows) == 1 + layers * 6
    picture = tmp_path / "trace.png"
    saved = runner.invoke(app, [*common, "-o", str(picture)])
    assert saved.exit_code == 0, saved.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--answer", ANSWER], "give --corrupt"),
        (["--corrupt", CORRUPT], "give --answer"),
        (["--answer", ANSWER, "--corrupt", CORRUPT, "--site", "ffn"], "ffn"),
        (
            ["--answer", ANSWER, "--corrupt", CORRUPT, "-o", "t.html", "-f", "csv"],
            "writes a picture or a page; -f writes data",
        ),
        (["--answer", ANSWER, "--corrupt", CORRUPT, "-o", "t.txt"], ".html"),
        # a trace's rows are the model's own positions: no token dropped nor merged
        (["--answer", ANSWER, "--corrupt", CORRUPT, "--words"], "No such option: --words"),
        (["--answer", ANSWER, "--corrupt", CORRUPT, "--no-special"], "--no-special"),
    ],
)
def test_usage_errors_before_a_model_loads(runner, arguments, message):
    result = runner.invoke(app, ["trace", TEXT, *arguments])
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_the_trace_page_shows_every_layer_and_position_and_its_effect_on_hover(
    browser, runner, generators, tmp_path
):
    model, text = generators["llama-lm"], "The man walked the dog because"
    corrupt = "The dog walked the man because"  # as many tokens
    path = tmp_path / "trace.html"
    arguments = ["trace", text, "--model", model, "--answer", " it", "--corrupt", corrupt]
    result = runner.invoke(app, [*arguments, "--site", "mlp", "-o", str(path)])
    assert result.exit_code == 0 and "trace at mlp" in result.stdout, result.stderr  # the table
    found = attnviz.load(model).trace(text, " it", corrupt, site="mlp")
    open_page(browser, path)
    assert page_errors(browser) == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    data = browser.execute_script("return window.attnviz.data")
    assert data["layers"] == found.layers and len(data["tokens"]) == len(found.tokens)
    np.testing.assert_allclose(np.array(data["effect"]), found.effect, atol=1e-6)
    canvas = browser.find_element("id", "trace")
    layers, positions = found.effect.shape
    from selenium.webdriver import ActionChains

    box = canvas.rect  # hover the middle of the last layer's second position
    x = (1.5 / positions) * box["width"] - box["width"] / 2
    y = ((layers - 0.5) / layers) * box["height"] - box["height"] / 2
    ActionChains(browser).move_to_element_with_offset(canvas, int(x), int(y)).perform()
    tip = browser.find_element("id", "tooltip")
    assert tip.get_attribute("data-row") == f"layer {found.layers[-1]}"
    assert tip.get_attribute("data-column") == "1"
    assert f"{found.effect[-1, 1]:+.3f}" in tip.text
    assert "corrupted" in browser.find_element("id", "notes").text


def test_the_help_describes_what_trace_does_and_only_its_options(runner):
    """The effects' options are shared with heads: their help says what the option is,
    and each command's own help what it computes with it."""
    result = runner.invoke(app, ["trace", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    for heads_only in (
        "each head",
        "sorted by ablation",
        "dla",
        " --dtype",
        "--words",
        "--no-special",
    ):
        assert heads_only not in result.stdout, heads_only
    assert "@FILE reads a file" in result.stdout
    heads = " ".join(runner.invoke(app, ["heads", "--help"], env={"COLUMNS": "300"}).stdout.split())
    assert "sorted by ablation" in heads and "patch (with --corrupt)" in heads


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm"])
def test_normalized_restoring_the_only_changed_token_at_layer_0_gives_1(runner, generators, family):
    """--normalize: (restored - corrupted) / (clean - corrupted). Restoring the residual
    stream entering layer 0 at the one token the corrupted text changed makes the
    corrupted run the clean one: all of the change comes back."""
    corrupt = TEXT.replace(" dog", " man")
    path = generators[family]
    common = ["trace", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", corrupt]
    plain = json.loads(runner.invoke(app, [*common, "-f", "json"]).stdout)
    result = runner.invoke(app, [*common, "-f", "json", "--normalize"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    changed = [i for i, (a, b) in enumerate(zip(document["tokens"], document["corrupt_tokens"],
                                                 strict=True)) if a != b]  # fmt: skip
    assert len(changed) == 1 and document["normalized"] is True
    effect = np.array(document["effect"])
    taken = plain["clean_metric"] - plain["corrupt_metric"]
    # The restored run is the clean one computed in another batch: the same metric to
    # float32's rounding, divided by what the corruption took (0.007 nats on GPT-2).
    config = transformers.AutoConfig.from_pretrained(path)
    rounding = model_tolerance(config) * max(1.0, abs(plain["clean_metric"])) / abs(taken)
    assert effect[0, changed[0]] == pytest.approx(1.0, abs=rounding)
    np.testing.assert_allclose(effect * taken, np.array(plain["effect"]), atol=1e-6)
    rows = runner.invoke(app, [*common, "-f", "csv", "--normalize"]).stdout.splitlines()[1:]
    assert float(rows[changed[0]].split(",")[-1]) == pytest.approx(1.0, abs=rounding)


def test_normalize_needs_a_corruption_that_moves_the_metric(runner, generators):
    from tests.checks import failed_in_process

    path = generators["gpt2-lm"]
    same = ["trace", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", TEXT, "--normalize"]
    failed_in_process(runner.invoke(app, same), 2, "the corrupted text leaves the metric")
    heads = ["heads", TEXT, "--model", path, "--answer", ANSWER, "--normalize"]
    failed_in_process(runner.invoke(app, heads), 2, "--normalize reads patch effects")
    corrupted = ["--corrupt", TEXT.replace(" dog", " man"), "-f", "json"]
    document = json.loads(runner.invoke(app, [*heads, *corrupted]).stdout)
    expected = json.loads(runner.invoke(app, [*heads[:-1], *corrupted]).stdout)
    taken = expected["clean_metric"] - expected["corrupt_metric"]
    by_head = {(row["layer"], row["head"]): row["patch"] for row in expected["heads"]}
    for row in document["heads"]:
        assert row["patch"] * taken == pytest.approx(by_head[row["layer"], row["head"]], abs=1e-6)
        assert row["ablation"] is not None


@pytest.mark.parametrize("family", ["gpt2-lm", "llama-lm"])
def test_every_sites_declared_shape_is_what_a_layer_records(language_models, family):
    """SITES says each site's shape in letters (T tokens, D the width, H query heads, K
    key/value heads, Dh a head's size, S keys): each layer's record has it."""
    import torch

    from attnviz.pretrained.anatomy import anatomy_of
    from attnviz.pretrained.effects import last_logits
    from attnviz.pretrained.sites import SITES, recorded, site_width, units_of

    extractor = language_models[family]
    model, config = extractor.loaded.model, extractor.loaded.model.config
    body = anatomy_of(extractor.loaded)
    ids = extractor.loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    heads = body.heads
    sizes = {
        "T": ids.shape[1],
        "S": ids.shape[1],
        "D": getattr(config, "hidden_size", None) or config.n_embd,
        "H": heads,
        "K": getattr(config, "num_key_value_heads", None) or heads,
        "Dh": body.head_size,
    }
    for site, point in SITES.items():
        with torch.inference_mode(), recorded(model, body, site) as kept:
            last_logits(model, {"input_ids": ids})
        expected = tuple(sizes[letter] for letter in point.shape.strip("()").split(", "))
        if point.pattern:
            assert tuple(kept[0].shape[1:]) == expected, site
            continue
        tokens, width = site_width(body, site, kept[0])
        units = units_of(body, site, 0, width)
        found = (tokens, units.count, units.size) if point.per_head else (tokens, units.size)
        assert found == expected, site


def test_every_site_is_in_the_help_and_the_table(runner):
    """A site is declared once: its label for --help, its place in a model for the passes."""
    from attnviz.choices import SITE_LABELS, Site
    from attnviz.pretrained.sites import SITES

    assert set(SITE_LABELS) == set(Site) and set(Site) <= set(SITES)
    helped = runner.invoke(app, ["trace", "--help"], env={"COLUMNS": "400"})
    shown = " ".join(helped.stdout.split())
    for site, label in SITE_LABELS.items():
        assert f"{site} ({label})" in shown
