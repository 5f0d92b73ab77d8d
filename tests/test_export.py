"""`attnviz export`: picture files for a paper (png, svg, pdf) of the maps show draws,
reproducible, at the size asked, and its refusals."""

from __future__ import annotations

import re

import pytest
from PIL import Image

from attnviz.cli import app
from attnviz.render.layout import head_figure_size

TEXT = "The man walked the dog"


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
@pytest.mark.parametrize(
    "view",
    [
        ["--view", "model"],
        ["--view", "layer", "-l", "1"],
        ["--view", "head", "-l", "0", "--head", "2"],
    ],
)
def test_export_writes_reproducible_pictures(runner, tmp_path, suffix, view):
    first, second = tmp_path / f"a.{suffix}", tmp_path / f"b.{suffix}"
    for path in (first, second):
        result = runner.invoke(app, ["export", TEXT, *view, "-o", str(path)])
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "" and result.stderr == ""
    assert first.read_bytes() == second.read_bytes()  # no timestamps, stable ids
    assert first.stat().st_size > 1000
    magic = {"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[suffix]
    assert first.read_bytes().startswith(magic)


def test_head_png_has_the_layout_size_at_the_dpi(runner, tmp_path):
    for dpi in (72, 150):
        path = tmp_path / f"head-{dpi}.png"
        one_head = ["--view", "head", "-l", "0", "--head", "0"]
        arguments = ["export", TEXT, *one_head, "--dpi", str(dpi), "-o", str(path)]
        result = runner.invoke(app, arguments)
        assert result.exit_code == 0, result.stderr
        width, height = head_figure_size(5, 5)
        with Image.open(path) as image:
            image.load()  # a complete, decodable PNG
            assert image.size == (int(width * dpi), int(height * dpi))


def test_values_and_colormap(runner, tmp_path):
    plain, coloured = tmp_path / "plain.png", tmp_path / "magma.png"
    base = ["export", TEXT, "--view", "head", "-l", "0", "--head", "0"]
    assert runner.invoke(app, [*base, "-o", str(plain)]).exit_code == 0
    result = runner.invoke(app, [*base, "--values", "--cmap", "magma", "-o", str(coloured)])
    assert result.exit_code == 0
    assert plain.read_bytes() != coloured.read_bytes()


# An Egyptian hieroglyph: in none of the fonts of the stack on a machine that has only
# what matplotlib ships, and the Control Pictures' ␞ (safe_text's way of showing 0x1e).
NO_FONT_HAS = "𓀀"


def test_a_character_no_font_has_is_drawn_as_its_escape_with_no_warning(runner, tmp_path):
    from attnviz.render.fonts import Fonts

    path = tmp_path / "glyph.svg"
    text = f"{NO_FONT_HAS} hello\x1e"
    result = runner.invoke(
        app, ["export", text, "--view", "head", "-l", "0", "--head", "0", "-o", str(path)]
    )
    assert result.exit_code == 0 and result.stderr == ""
    drawn = " ".join(re.findall(r"<!-- (.*?) -->", path.read_text()))  # SVG's text, as drawn
    fonts = Fonts.installed()
    assert all(ord(character) in fonts.characters for character in drawn if character != " ")
    assert ("\\U00013000" in drawn) == (ord(NO_FONT_HAS) not in fonts.characters)
    assert "hello" in drawn


def test_a_glyph_missing_from_a_face_of_the_stack_is_one_warning_not_a_crash(
    runner, tmp_path, monkeypatch
):
    """The net under the stack: a face that lacks a glyph its family's regular face has
    (here: a stack that claims every character) is said in one line, the picture written."""
    from attnviz.render import fonts

    monkeypatch.setattr(fonts.Fonts, "text", lambda _self, text: text)
    path = tmp_path / "glyph.png"
    result = runner.invoke(
        app, ["export", f"{NO_FONT_HAS} hello", "--view", "head", "-l", "0", "--head", "0",
              "-o", str(path)]
    )  # fmt: skip
    assert result.exit_code == 0
    assert path.read_bytes().startswith(b"\x89PNG")
    assert result.stderr.startswith("attnviz: warning: no installed font has 1 of the characters")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["-o", "{tmp}/x.gif"], 2, "name it .png, .svg, .pdf or .html"),
        (["-o", "{tmp}/x.png", "--cmap", "nope"], 2, "unknown colormap 'nope'"),
        (["-o", "{tmp}/x.png", "--view", "head"], 2, "--view head draws one map"),
        (["-o", "{tmp}/x.png", "--view", "layer"], 2, "--view layer draws one layer"),
        (["-o", "{tmp}/missing/x.png"], 1, "does not exist"),
        (["-o", "{tmp}"], 2, "name it .png"),
    ],
)
def test_export_errors(runner, tmp_path, arguments, code, message):
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    result = runner.invoke(app, ["export", TEXT, *arguments])
    assert result.exit_code == code, result.stderr
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert not list(tmp_path.glob("*.png"))


def test_export_an_aggregate(runner, tmp_path):
    path = tmp_path / "rollout.svg"
    result = runner.invoke(
        app, ["export", TEXT, "-a", "rollout", "--view", "head", "-o", str(path)]
    )
    assert result.exit_code == 0, result.stderr
    assert "rollout" in path.read_text()


def test_a_1024_token_map_makes_a_picture_of_bounded_size(runner, tmp_path):
    text = " ".join(f"w{i % 50}" for i in range(1024))
    path = tmp_path / "long.png"
    one_head = ["--view", "head", "-l", "0", "--head", "0"]
    result = runner.invoke(app, ["export", text, *one_head, "--vmax", "0.02", "-o", str(path)])
    assert result.exit_code == 0, result.stderr
    with Image.open(path) as image:
        image.load()
        assert max(image.size) < 1400  # cells shrink to a pixel; the picture stays ~10 inches


def test_head_picture_with_figsize_has_that_size_and_fits_its_title(runner, tmp_path):
    from PIL import Image

    out = tmp_path / "h.png"
    result = runner.invoke(
        app, ["export", "Hello I love you", "-o", str(out), "--view", "head", "-l", "0",
              "--head", "0", "--figsize", "3.5,3", "--dpi", "100", "--title", "A long title " * 3],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert Image.open(out).size == (350, 300)
