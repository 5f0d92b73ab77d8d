"""The interactive page (issue 14) in a real browser: headless Chromium driven by Selenium
through the system's chromedriver, with every network request blocked.

Without a browser these tests skip with one loud line; with ATTNVIZ_REQUIRE_BROWSER=1
(as .ci/run sets it) they fail instead, so CI cannot pass without them.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re

import numpy as np
import pytest

import attnviz
from attnviz.cli import app
from attnviz.render.page import MAX_CELLS, page_data, page_html
from tests.checks import open_page, page_errors

HOSTILE = [
    "</script><script>window.pwned=1</script>",
    "</textarea>",
    "\"quoted'",
    "\u202eevil",
    "\x1b[2J",
]


@pytest.fixture
def exported(runner, tmp_path):
    path = tmp_path / "page.html"
    result = runner.invoke(app, ["export", "The man walked the dog", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    return path, attnviz.extract("The man walked the dog")


def test_the_exported_page_loads_offline_with_no_errors_and_no_requests(browser, exported):
    path, maps = exported
    open_page(browser, path)
    assert page_errors(browser) == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    html = path.read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"""(src|href)=["']?https?:""", html)  # nothing points outside
    figures = browser.find_elements("css selector", "#grid figure")
    heads = len(maps.layers) * len(maps.heads)
    assert len(figures) == heads + 2 * len(maps.layers) + 1  # + mean, max per layer, rollout


def test_hovering_a_query_token_shows_its_lines_and_the_maps_own_weights(browser, exported):
    from selenium.webdriver import ActionChains

    path, maps = exported
    open_page(browser, path)
    browser.find_element("id", "tab-layer").click()
    query = 2
    token = browser.find_elements("css selector", "#queries .token")[query]
    ActionChains(browser).move_to_element(token).perform()
    assert "active" in token.get_attribute("class")
    shown = [
        float(element.text) for element in browser.find_elements("css selector", "#keys .token .w")
    ]
    np.testing.assert_allclose(shown, maps.head(0, 0)[query], atol=0.006)  # 8-bit, 2 decimals


def test_hovering_a_cell_shows_query_key_and_weight(browser, exported):
    from selenium.webdriver import ActionChains

    path, maps = exported
    open_page(browser, path)
    browser.find_element("id", "tab-head").click()
    canvas = browser.find_element("id", "map")
    ActionChains(browser).move_to_element_with_offset(
        canvas, -canvas.size["width"] // 3, 0
    ).perform()
    tip = browser.find_element("id", "tooltip")
    row, column = int(tip.get_attribute("data-row")), int(tip.get_attribute("data-column"))
    assert tip.text.startswith(f"{maps.query_tokens[row]} → {maps.key_tokens[column]}")
    assert float(tip.text.split()[-1]) == pytest.approx(maps.head(0, 0)[row, column], abs=0.006)


def test_views_layers_and_heads_switch_by_mouse_and_keyboard(browser, exported):
    from selenium.webdriver.common.keys import Keys

    path, _ = exported
    open_page(browser, path)
    axes = browser.find_element("id", "axes")
    browser.find_element("css selector", "#grid figure[data-index='5']").click()  # L1 H1
    assert browser.find_element("id", "view-head").is_displayed()
    assert axes.text.endswith("layer 1 · head 1")
    body = browser.find_element("tag name", "body")
    body.send_keys(Keys.ARROW_RIGHT)
    assert axes.text.endswith("layer 1 · head 2")
    body.send_keys(Keys.ARROW_UP)
    assert axes.text.endswith("layer 0 · head 2")
    browser.find_element("id", "tab-layer").click()
    assert browser.find_element("id", "view-layer").is_displayed()
    checked = browser.find_elements("css selector", "#head-toggles input:checked")
    assert [box.get_attribute("data-index") for box in checked] == ["2"]
    assert page_errors(browser) == []


def test_hiding_special_tokens_renormalises_rows(browser, tiny, tmp_path):
    from selenium.webdriver import ActionChains

    maps = attnviz.load(tiny["bert"]).extract("The man walked the dog", layers=0)
    path = tmp_path / "bert.html"
    path.write_text(maps.to_html(view="layer"))  # the page's layer view: lines, a colour per head
    open_page(browser, path)
    browser.find_element("id", "hide-special").click()
    tokens = [t.text for t in browser.find_elements("css selector", "#queries .token")]
    assert "[CLS]" not in tokens and len(tokens) == len(maps.query_tokens) - 2
    ActionChains(browser).move_to_element(
        browser.find_elements("css selector", "#queries .token")[0]
    ).perform()
    shown = [float(w.text) for w in browser.find_elements("css selector", "#keys .token .w")]
    kept = maps.head(0, 0)[1:-1, 1:-1]
    np.testing.assert_allclose(shown, kept[0] / kept[0].sum(), atol=0.006)


def test_hostile_token_text_is_shown_never_run(browser, tmp_path):
    count = len(HOSTILE)
    weights = np.full((1, 1, count, count), 1 / count, dtype=np.float32)
    maps = attnviz.AttentionMaps(HOSTILE, HOSTILE, weights, [0], [0], "self", "<b>model</b>")
    path = tmp_path / "hostile.html"
    path.write_text(maps.to_html(view="layer"))  # the page's layer view: lines, a colour per head
    open_page(browser, path)
    assert browser.execute_script("return window.pwned === undefined")
    shown = [
        t.get_attribute("textContent")
        for t in browser.find_elements("css selector", "#queries .token")
    ]
    assert shown == HOSTILE  # the very text, as text
    assert browser.find_element("id", "heading").text == "<b>model</b> · self attention"
    assert page_errors(browser) == []


def test_the_map_view_looks_as_it_did(browser, tmp_path, snapshot_image):
    maps = attnviz.extract("Hello I love you", layers=0, heads=1)
    path = tmp_path / "map.html"
    path.write_text(maps.to_html(view="head"))  # the page's head view: one map
    open_page(browser, path)
    picture = browser.find_element("id", "map-box").screenshot_as_png
    snapshot_image("page_map_view.png", picture)


@pytest.fixture
def snapshot_image():
    """Compare a screenshot with tests/snapshots/NAME within a tolerance (fonts anti-alias
    a little differently from run to run); ATTNVIZ_UPDATE_SNAPSHOTS=1 rewrites it."""
    from pathlib import Path

    from PIL import Image

    def check(name: str, png: bytes) -> None:
        path = Path(__file__).parent / "snapshots" / name
        if os.environ.get("ATTNVIZ_UPDATE_SNAPSHOTS") == "1":
            path.write_bytes(png)
        stored = np.asarray(Image.open(path).convert("RGB"), dtype=float)
        taken = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=float)
        assert taken.shape == stored.shape
        difference = np.abs(taken - stored)
        assert difference.mean() < 2.0 and (difference.max(-1) > 64).mean() < 0.01

    return check


def test_weights_travel_as_eight_bit_levels_within_a_fifth_of_a_percent():
    maps = attnviz.extract("The man walked the dog because it was tired")
    data = page_data(maps)
    levels = np.frombuffer(base64.b64decode(data["levels"]), dtype=np.uint8)
    levels = levels.reshape(data["shape"])[: len(maps.layers) * len(maps.heads)]
    decoded = levels.reshape(maps.weights.shape) / 255 * data["scale"]
    assert np.abs(decoded - maps.weights).max() <= 0.5 / 255 + 1e-7
    assert not re.search(r"\d\.\d{3,}", page_html(maps).split("attnviz-data")[1][:2000])


@pytest.mark.slow
def test_a_document_too_large_for_a_page_is_pooled_and_says_so():
    rng = np.random.default_rng(0)
    weights = rng.random((6, 12, 700, 700), dtype=np.float32)
    weights /= weights.sum(-1, keepdims=True)
    tokens = [f"t{i}" for i in range(700)]
    maps = attnviz.AttentionMaps(
        tokens, tokens, weights, list(range(6)), list(range(12)), "self", "m"
    )
    page = page_html(maps)
    assert len(page) < 1.4 * MAX_CELLS  # base64 of the cell budget, and the rest
    data = json.loads(page.split("id='attnviz-data'>")[1].split("</script>")[0])
    assert data["pool"] > 1 and any("pooled" in note for note in data["notes"])


def test_notebook_output_is_the_page_in_an_iframe_and_bounded(tiny):
    maps = attnviz.load(tiny["bert"]).extract(" ".join(["The man walked the dog"] * 4))
    output = maps._repr_html_()
    assert output.startswith("<iframe srcdoc=") and "sandbox='allow-scripts'" in output
    assert "&lt;script&gt;" in output and "<script>" not in output  # all inside srcdoc
    assert len(output) < 4_000_000


def test_show_html_writes_the_page(tmp_path):
    maps = attnviz.extract("Hello I love you")
    path = attnviz.show_html(maps, tmp_path / "x.html", open_browser=False)
    assert path.read_text().startswith("<!doctype html>")


def test_the_last_rows_over_a_long_text_are_strips_in_both_views(browser, runner, tmp_path):
    """--rows last over 300 tokens: each map is a strip tall enough to see and to point
    at (its row's cells up to 28 px in the head view, 8 px in the model view)."""
    from selenium.webdriver import ActionChains

    path = tmp_path / "page.html"
    text = " ".join(f"w{i}" for i in range(300))
    result = runner.invoke(app, ["export", text, "--rows", "last", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    open_page(browser, path)
    thumbnails = browser.find_elements("css selector", "#grid figure canvas")
    assert thumbnails and all(canvas.size["height"] >= 8 for canvas in thumbnails)
    browser.find_element("id", "tab-head").click()
    canvas = browser.find_element("id", "map")
    assert canvas.size["height"] >= 28 and canvas.size["width"] >= 8 * canvas.size["height"]
    ActionChains(browser).move_to_element_with_offset(canvas, 0, 0).perform()
    tip = browser.find_element("id", "tooltip")
    assert tip.text.startswith("w299 → ")  # the one row, where it is pointed at
    (row_label,) = browser.find_elements("css selector", "#map-rows span")
    assert row_label.text == "w299"
    assert page_errors(browser) == []


def test_the_page_tints_each_head_by_its_effect_and_sorts_by_it(
    browser, runner, generators, tmp_path
):
    """export --answer --corrupt -o page.html: each head's frame in the model view carries
    the effect `heads` measures (patch, ablation, dla), red where the metric rises, blue
    where it falls; sorting orders each layer's heads by it. It opens on patch, what the
    corrupted text was given for (it opened on ablation)."""
    model, text = generators["gpt2-lm"], "The man walked the dog because"
    corrupt = "The dog walked the man because"  # as many tokens
    path = tmp_path / "page.html"
    arguments = ["export", text, "--model", model, "--answer", " it", "--versus", " the"]
    result = runner.invoke(app, [*arguments, "--corrupt", corrupt, "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    table = attnviz.load(model).head_effects(text, " it", versus=" the", corrupt=corrupt)
    open_page(browser, path)
    assert page_errors(browser) == []
    data = browser.execute_script("return window.attnviz.data")
    assert set(data["effects"]["columns"]) == {"ablation", "dla", "patch"}
    assert browser.execute_script("return document.getElementById('effect').value") == "patch"
    shown = {}
    for figure in browser.find_elements("css selector", "#grid figure[data-effect]"):
        entry = data["maps"][int(figure.get_attribute("data-index"))]
        shown[entry["layer"], entry["head"]] = float(figure.get_attribute("data-effect"))
        colour = figure.find_element("tag name", "canvas").value_of_css_property("border-color")
        red, _, blue = (int(part) for part in re.findall(r"\d+", colour)[:3])
        value = shown[entry["layer"], entry["head"]]
        assert (red >= blue) if value > 0 else (blue >= red)
    expected = {
        (layer, head): table.of(layer, head)["patch"]
        for layer in table.layers
        for head in table.heads
    }
    assert shown.keys() == expected.keys()  # every head framed, no aggregate
    assert all(shown[place] == pytest.approx(expected[place], abs=1e-6) for place in expected)

    browser.execute_script(
        "const s = document.getElementById('effect'); s.value = 'ablation';"
        "s.dispatchEvent(new Event('change'));"
        "document.getElementById('sort-effect').click();"
    )
    first_layer = table.layers[0]
    ordered = [
        float(figure.get_attribute("data-effect"))
        for figure in browser.find_elements("css selector", "#grid figure[data-effect]")
        if data["maps"][int(figure.get_attribute("data-index"))]["layer"] == first_layer
    ]
    ablation = [table.of(first_layer, head)["ablation"] for head in table.heads]
    assert ordered == pytest.approx(sorted(ablation, reverse=True), abs=1e-6)
    assert "red raises it" in browser.find_element("id", "notes").text


def test_the_page_draws_the_circuit_an_edges_score_on_hover_a_heads_map_on_click(
    browser, runner, generators, tmp_path
):
    """export --answer --corrupt -o page.html: a circuit view draws the kept edges of the
    circuit `circuit` finds (EAP, its defaults), each with its score; hovering one says
    it, clicking a head opens that head's map."""
    model, text = generators["gpt2-lm"], "The man walked the dog because"
    corrupt = "The dog walked the man because"
    path = tmp_path / "page.html"
    arguments = ["export", text, "--model", model, "--answer", " it", "--versus", " the"]
    result = runner.invoke(app, [*arguments, "--corrupt", corrupt, "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    found = attnviz.load(model).circuit(text, " it", corrupt, versus=" the")
    expected = {(first, then): score for first, then, score in found.kept_edges()}
    open_page(browser, path)
    browser.find_element("id", "tab-circuit").click()
    # the maps' controls do nothing in the circuit view: hidden there, back with the maps
    maps_controls = ("layer", "head", "hide-special", "axes")
    assert not any(browser.find_element("id", name).is_displayed() for name in maps_controls)
    edges = browser.find_elements("css selector", "#circuit path.edge")
    drawn = {
        (edge.get_attribute("data-from"), edge.get_attribute("data-to")): float(
            edge.get_attribute("data-score")
        )
        for edge in edges
    }
    assert drawn.keys() == expected.keys() and len(drawn) == found.kept
    assert all(drawn[edge] == pytest.approx(expected[edge], abs=1e-6) for edge in expected)
    strongest = edges[-1]  # drawn last, on top
    browser.execute_script(
        "const box = arguments[0].getBoundingClientRect();"
        "const at = {clientX: box.x, clientY: box.y};"
        "arguments[0].dispatchEvent(new MouseEvent('mousemove', at));",
        strongest,
    )
    first, then = strongest.get_attribute("data-from"), strongest.get_attribute("data-to")
    assert browser.find_element("id", "tooltip").text.startswith(f"{first} → {then}  ")
    assert "faithfulness" in browser.find_element("id", "circuit-lines").text
    # no two labels overlap: each head's fits before the next head's dot
    boxes = browser.execute_script(
        "return [...document.querySelectorAll('#circuit text.label')].map((t) => {"
        "const b = t.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; });"
    )
    assert len(boxes) >= 2
    for first, (left, top, right, bottom) in enumerate(boxes):
        for other in boxes[first + 1 :]:
            apart = right <= other[0] or other[2] <= left or bottom <= other[1] or other[3] <= top
            assert apart, (boxes[first], other)
    node = browser.find_element("css selector", "#circuit circle.node.head.used")
    layer, head = (int(part) for part in re.findall(r"\d+", node.get_attribute("data-name")))
    node.click()
    shown = browser.execute_script(
        "const s = window.attnviz.state; const d = window.attnviz.data;"
        "const own = d.maps.filter((m) => m.layer === d.maps.filter((n) => n.layer !== null)"
        ".map((n) => n.layer).filter((v, i, a) => a.indexOf(v) === i)[s.layer]);"
        "return [s.view, own[s.head].layer, own[s.head].head];"
    )
    assert shown == ["head", layer, head]
    assert all(browser.find_element("id", name).is_displayed() for name in maps_controls)
    assert page_errors(browser) == []


def test_a_corrupted_text_without_the_page_is_refused(runner, generators, tmp_path):
    arguments = ["export", "a b", "--model", generators["gpt2-lm"], "--answer", " it"]
    result = runner.invoke(app, [*arguments, "--corrupt", "a c", "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "--corrupt applies to the page" in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_circuit_in_a_notebook_is_its_header_and_its_own_interactive_graph(
    browser, language_models, tmp_path
):
    """A Circuit's _repr_html_: its one-line header, then its own page in a sandboxed
    frame (offline: the page's circuit view without the maps), every kept edge drawn with
    its score, an edge's score on hover, the labels apart."""
    import html

    circuit = language_models["gpt2-lm"].circuit(
        "The man walked the dog because", " it", "The dog walked the man because", edges=12
    )
    shown = circuit._repr_html_()
    assert shown.startswith(f"<p><code>{html.escape(repr(circuit))}</code></p><iframe srcdoc=")
    assert "sandbox='allow-scripts'" in shown and "://" not in shown
    page = html.unescape(shown.split('srcdoc="', 1)[1].split('" style=', 1)[0])
    path = tmp_path / "circuit.html"
    path.write_text(page, encoding="utf-8")
    open_page(browser, path)
    edges = browser.find_elements("css selector", "#circuit path.edge")
    drawn = {(edge.get_attribute("data-from"), edge.get_attribute("data-to")) for edge in edges}
    assert drawn == {(first, then) for first, then, _ in circuit.kept_edges()}
    browser.execute_script(
        "const box = arguments[0].getBoundingClientRect();"
        "const at = {clientX: box.x, clientY: box.y};"
        "arguments[0].dispatchEvent(new MouseEvent('mousemove', at));",
        edges[-1],
    )
    assert " → " in browser.find_element("id", "tooltip").text
    assert "faithfulness" in browser.find_element("id", "circuit-lines").text
    assert page_errors(browser) == []
