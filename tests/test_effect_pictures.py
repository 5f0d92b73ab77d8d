"""Figures of effects for a paper, from the command line and from Python: the size, dpi,
fonts and title export takes; a labelled colour bar; titles never broken inside a quoted
token; the tokens the corrupted text changed marked; a notebook shows them."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

import attnviz
from attnviz.cli import app
from attnviz.errors import UsageError
from attnviz.render.effects import wrapped
from tests.checks import failed_in_process
from tests.hook_references import ANSWER, CORRUPT, TEXT, VERSUS


@pytest.fixture(scope="module")
def measured(generators):
    extractor = attnviz.load(generators["gpt2-lm"])
    effects = extractor.head_effects(TEXT, ANSWER, corrupt=CORRUPT)
    trace = extractor.trace(TEXT, ANSWER, CORRUPT, versus=VERSUS)
    return effects, trace


def _pixels(data: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(data)).size


def test_effects_and_traces_draw_from_python_and_show_in_a_notebook(measured, tmp_path):
    effects, trace = measured
    for found in (effects, trace):
        picture = found.picture()
        assert picture.data.startswith(b"\x89PNG") and found._repr_png_() == picture.data
        assert "array" not in repr(found) and len(repr(found)) < 200
    assert repr(effects).startswith(f"<HeadEffects on answer {ANSWER!r}")
    assert "3 layers × 4 heads, ablation, dla, patch" in repr(effects)
    assert repr(trace).startswith("<Trace at resid of ") and "6 positions" in repr(trace)
    effects.save(tmp_path / "dla.pdf", column="dla", figsize=(3.5, 3), font_size=8, title="Fig. 2")
    trace.save(tmp_path / "trace.svg")
    assert (tmp_path / "dla.pdf").read_bytes().startswith(b"%PDF")
    assert b"<svg" in (tmp_path / "trace.svg").read_bytes()
    with pytest.raises(UsageError, match="cmap: a figure of effects takes dpi"):
        effects.picture(cmap="magma")
    with pytest.raises(UsageError, match="not 'entropy'"):
        effects.picture("entropy")


def test_dpi_and_figsize_set_the_pixels(measured):
    effects, trace = measured
    for found in (effects, trace):
        small, large = _pixels(found.picture(dpi=50).data), _pixels(found.picture(dpi=100).data)
        assert large == (2 * small[0], 2 * small[1])
    assert _pixels(effects.picture(figsize=(4, 3), dpi=100).data) == (400, 300)


def test_the_colour_bar_says_what_the_numbers_are_and_changed_tokens_are_marked(measured):
    effects, trace = measured
    svg = trace.picture("svg").data.decode()
    assert "change in logit difference (logits)" in svg  # trace was measured with a versus
    changed = [t for t, c in zip(trace.tokens, trace.corrupt_tokens, strict=True) if t != c]
    assert changed and all(f"{token.strip()}*" in svg for token in changed)
    kept = [t for t, c in zip(trace.tokens, trace.corrupt_tokens, strict=True) if t == c]
    assert all(f"{token.strip()}*" not in svg for token in kept)
    drawn = effects.picture("dla", "svg").data.decode()
    assert "direct logit attribution (logits)" in drawn
    assert "change in log-probability (nats)" in effects.picture("ablation", "svg").data.decode()


def _words(svg: bytes) -> str:
    """The words an SVG's texts spell (matplotlib draws each as paths under a comment of
    its text), its lines joined by spaces."""
    texts = re.findall(r"<!-- (.*?) -->", svg.decode(), re.S)
    return " ".join(texts).replace("\u00a0", " ")


def test_an_answer_picture_names_its_text_answer_and_ablation(generators, measured):
    effects, _ = measured
    assert len(TEXT) < 40  # quoted whole
    assert f"{TEXT!r} → {ANSWER!r} · dla" in _words(effects.picture("dla", "svg").data)
    assert "· zero ablation ·" in _words(effects.picture("ablation", "svg").data)
    long = " ".join([TEXT] * 4)
    mean = attnviz.load(generators["gpt2-lm"]).head_effects(long, ANSWER, ablate="mean")
    drawn = _words(mean.picture("ablation", "svg").data)
    assert "· mean ablation ·" in drawn and "zero" not in drawn
    assert f"{long[:39]}…' → {ANSWER!r}" in drawn and long not in drawn  # its start, cut


def test_a_title_never_breaks_inside_a_quoted_token():
    title = "smollm2 · trace at resid · answer ' Paris' · logit(' Paris') − logit(' Rome')"
    for width in range(10, 60):
        for line in wrapped(title, width).splitlines():
            assert line.count("'") % 2 == 0, (width, line)


def test_heads_and_trace_take_exports_figure_options(runner, generators, tmp_path):
    path = generators["gpt2-lm"]
    heads = ["heads", TEXT, "--model", path, "--answer", ANSWER]
    sizes = {}
    for dpi in (50, 100):
        picture = tmp_path / f"heads-{dpi}.png"
        result = runner.invoke(app, [*heads, "--picture", str(picture), "--dpi", str(dpi)])
        assert result.exit_code == 0, result.stderr
        sizes[dpi] = _pixels(picture.read_bytes())
    assert sizes[100] == (2 * sizes[50][0], 2 * sizes[50][1])
    trace = ["trace", TEXT, "--model", path, "--answer", ANSWER, "--corrupt", CORRUPT]
    for spelling in ("--picture", "-o"):
        picture = tmp_path / f"trace{spelling}.png"
        result = runner.invoke(app, [*trace, spelling, str(picture), "--figsize", "4,3"])
        assert result.exit_code == 0, result.stderr
        assert _pixels(picture.read_bytes()) == (400, 300)
    failed_in_process(runner.invoke(app, [*heads, "--dpi", "50"]), 2, "--dpi applies to")
    page = str(tmp_path / "trace.html")
    failed_in_process(runner.invoke(app, [*trace, "-o", page, "--title", "x"]), 2, "--title")
    failed_in_process(runner.invoke(app, [*trace, "--cmap", "magma"]), 2, "No such option")


def test_a_knockout_draws_from_python_and_with_heads_picture(runner, generators, tmp_path):
    extractor = attnviz.load(generators["gpt2-lm"])
    knocked = extractor.knockout(TEXT, ANSWER, "last", "dog")
    assert "array" not in repr(knocked) and repr(knocked).startswith("<Knockout on answer")
    svg = knocked.picture("svg").data.decode()
    assert "change in log-probability (nats)" in svg and "layer (a window of 1)" in svg
    assert _pixels(knocked.picture(dpi=100).data) == tuple(2 * n for n in _pixels(
        knocked.picture(dpi=50).data))  # fmt: skip
    picture = tmp_path / "knockout.png"
    arguments = ["heads", TEXT, "--model", generators["gpt2-lm"], "--answer", ANSWER]
    result = runner.invoke(app, [*arguments, "--knockout", "last:dog", "--picture", str(picture)])
    assert result.exit_code == 0, result.stderr
    assert picture.read_bytes() == knocked.picture().data


# An Egyptian hieroglyph (in none of the fonts of the stack where only matplotlib's are
# installed) and a control character (safe_text shows it as ␞, in none of them either).
NO_FONT_HAS = "𓀀\x1e"


def _drawn_text(svg):
    """The texts an SVG of matplotlib's draws, as it writes each beside its glyphs."""
    return " ".join(re.findall(r"<!-- (.*?) -->", svg))


def test_every_figure_draws_what_no_font_has_as_its_escape_with_no_warning(
    measured, language_models
):
    """No box and no warning: every character of every figure's texts is one the font
    stack has, a character none of its fonts has drawn as its escape."""
    import dataclasses
    import warnings

    from attnviz.render.fonts import Fonts

    effects, trace = measured
    extractor = language_models["gpt2-lm"]
    lens = extractor.lens(TEXT)
    circuit = extractor.circuit(TEXT, ANSWER, CORRUPT, edges=5)
    figures = {
        "effects": dataclasses.replace(
            effects, on=dataclasses.replace(effects.on, answer_token=NO_FONT_HAS)
        ),
        "trace": dataclasses.replace(trace, tokens=[NO_FONT_HAS] * len(trace.tokens)),
        "lens": dataclasses.replace(lens, tokens=[NO_FONT_HAS] * len(lens.tokens)),
        "circuit": dataclasses.replace(
            circuit, promoted=tuple(NO_FONT_HAS for _ in circuit.promoted)
        ),
    }
    fonts = Fonts.installed()
    for name, found in figures.items():
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            found.picture(format="png")
            drawn = _drawn_text(found.picture(format="svg").data.decode())
        assert said == [], (name, said)
        assert all(ord(character) in fonts.characters for character in drawn if character != " ")
        if ord("𓀀") not in fonts.characters:
            assert "\\U00013000" in drawn, name
        if ord("␞") not in fonts.characters:
            assert "\\x1e" in drawn, name


def test_the_lens_picture_of_a_character_no_font_has_says_nothing_on_the_command_line(
    runner, generators, tmp_path
):
    picture = tmp_path / "lens.png"
    arguments = ["lens", f"{NO_FONT_HAS} a b c", "--model", generators["gpt2-lm"]]
    result = runner.invoke(app, [*arguments, "--picture", str(picture)])
    assert result.exit_code == 0 and result.stderr == ""
    assert picture.read_bytes().startswith(b"\x89PNG") and "logit lens" in result.stdout


def test_a_picture_saves_itself_to_a_file_of_its_format(measured, tmp_path):
    _, trace = measured
    path = tmp_path / "trace.svg"
    drawn = trace.picture(format="svg")
    drawn.save(path)
    assert path.read_bytes() == drawn.data
    with pytest.raises(UsageError, match="names a png picture; this one is svg"):
        drawn.save(tmp_path / "trace.png")
    assert not (tmp_path / "trace.png").exists()


def test_a_circuits_node_labels_never_overlap(language_models):
    """Every node labelled, with a long promoted token, in a small figure: each label is
    fitted to the room before the next head (shrunk, then cut), so no two overlap."""
    import dataclasses

    from attnviz.choices import Output
    from attnviz.render.circuit import circuit_drawing
    from attnviz.render.figures import saved
    from attnviz.render.style import Style

    circuit = language_models["gpt2-lm"].circuit(TEXT, ANSWER, CORRUPT, edges="all")
    long_tokens = tuple("promotedtoken" for _ in circuit.promoted)
    circuit = dataclasses.replace(circuit, promoted=long_tokens)
    for size, labelled in (((3.0, 2.5), 1), ((5.0, 3.0), circuit.graph.heads)):
        figure, fit_labels = circuit_drawing(circuit, Style(figsize=size))
        saved(figure, Output.PNG, then=fit_labels)
        renderer = figure.canvas.get_renderer()
        boxes = [
            text.get_window_extent(renderer) for text in figure.axes[0].texts if text.get_text()
        ]
        # where no room is left a label goes (the axes name every node): in the larger
        # figure every head of a layer keeps its own
        assert len(boxes) >= labelled
        for first, box in enumerate(boxes):
            assert not any(box.overlaps(other) for other in boxes[first + 1 :]), size


def test_a_circuits_labels_are_the_tokenizers_own_text_its_spaces_shown(language_models):
    """A byte-level vocabulary's symbols (Ġ for a space, Ā… for control bytes) are never
    shown: a node's token is the tokenizer's decoding, a space in it shown as ␣ and a
    control character as its symbol."""
    import dataclasses

    from attnviz.render.circuit import circuit_drawing
    from attnviz.render.style import Style

    circuit = language_models["gpt2-lm"].circuit(TEXT, ANSWER, CORRUPT, edges="all")
    byte_symbols = {chr(code) for code in range(0x100, 0x144)}
    assert not any(set(token) & byte_symbols for token in circuit.promoted)
    promoted = (circuit.promoted[0], " because", "\x1e", *circuit.promoted[3:])  # a0.h0, a0.h1
    shown = dataclasses.replace(circuit, promoted=promoted)
    figure, _ = circuit_drawing(shown, Style(figsize=(9.0, 4.0)))
    labels = [text.get_text() for text in figure.axes[0].texts]
    assert any(label.endswith("→␣because") for label in labels), labels
    assert any(label.endswith("→␞") for label in labels), labels
