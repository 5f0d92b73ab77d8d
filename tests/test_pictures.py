"""export: picture files of the expected size, reproducible, and clear errors."""

from __future__ import annotations

import pytest
from PIL import Image

import attnviz
from attnviz.cli import app
from attnviz.render.canvas import HeadCanvas
from attnviz.render.layout import head_figure_size
from attnviz.render.png import encode_png
from attnviz.render.style import Style

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
        result = runner.invoke(
            app,
            [
                "export",
                TEXT,
                "--view",
                "head",
                "-l",
                "0",
                "--head",
                "0",
                "--dpi",
                str(dpi),
                "-o",
                str(path),
            ],
        )
        assert result.exit_code == 0, result.stderr
        width, height = head_figure_size(5, 5)
        with Image.open(path) as image:
            image.load()  # a complete, decodable PNG
            assert image.size == (int(width * dpi), int(height * dpi))


def test_fast_png_matches_a_full_matplotlib_draw():
    """The fast path paints cells; matplotlib drawing the whole figure is the reference."""
    import io

    import numpy as np

    from attnviz.render.style import Frame

    maps = attnviz.extract(TEXT, layers=0, heads=0)
    panel = next(maps.panels())
    frame = Frame("header", tuple(maps.query_tokens), tuple(maps.key_tokens))
    canvas = HeadCanvas(5, 5, Style())
    fast = canvas.png(panel.matrix, frame, panel.title)
    full = canvas.vector(panel.matrix, frame, panel.title, attnviz.Output.PNG)
    with Image.open(io.BytesIO(fast)) as a, Image.open(io.BytesIO(full)) as b:
        fast_pixels, full_pixels = np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB"))
    assert fast_pixels.shape == full_pixels.shape
    for q in range(5):
        for k in range(5):
            y = (canvas.y[q] + canvas.y[q + 1]) // 2
            x = (canvas.x[k] + canvas.x[k + 1]) // 2
            difference = np.abs(fast_pixels[y, x].astype(int) - full_pixels[y, x].astype(int))
            assert difference.max() <= 2, (q, k, fast_pixels[y, x], full_pixels[y, x])
    # Away from the cells (labels, colour bar, title) the two pictures agree too.
    assert np.mean(np.abs(fast_pixels.astype(int) - full_pixels.astype(int)) > 8) < 0.01


def test_png_encoder_round_trips_pixels():
    import io

    import numpy as np

    rng = np.random.default_rng(0)
    rgba = rng.integers(0, 256, size=(7, 11, 4), dtype=np.uint8)
    with Image.open(io.BytesIO(encode_png(rgba))) as image:
        assert image.mode == "RGB"
        assert (np.asarray(image) == rgba[..., :3]).all()


def test_values_and_colormap(runner, tmp_path):
    plain, coloured = tmp_path / "plain.png", tmp_path / "magma.png"
    base = ["export", TEXT, "--view", "head", "-l", "0", "--head", "0"]
    assert runner.invoke(app, [*base, "-o", str(plain)]).exit_code == 0
    result = runner.invoke(app, [*base, "--values", "--cmap", "magma", "-o", str(coloured)])
    assert result.exit_code == 0
    assert plain.read_bytes() != coloured.read_bytes()


def test_a_missing_glyph_is_a_warning_not_a_crash(runner, tmp_path):
    path = tmp_path / "glyph.png"
    # An Egyptian hieroglyph: in none of the fonts matplotlib draws labels with.
    result = runner.invoke(
        app, ["export", "𓀀 hello", "--view", "head", "-l", "0", "--head", "0", "-o", str(path)]
    )
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
    result = runner.invoke(
        app,
        [
            "export",
            text,
            "--view",
            "head",
            "-l",
            "0",
            "--head",
            "0",
            "--vmax",
            "0.02",
            "-o",
            str(path),
        ],
    )
    assert result.exit_code == 0, result.stderr
    with Image.open(path) as image:
        image.load()
        assert max(image.size) < 1400  # cells shrink to a pixel; the picture stays ~10 inches


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
@pytest.mark.parametrize(
    ("options", "view", "choice", "style"),
    [
        ([], "model", {}, {}),
        (["-l", "1"], "layer", {"layer": 1}, {"cmap": "magma", "title": "Figure 2"}),
        (["-l", "0", "--head", "2"], "head", {"layer": 0, "head": 2}, {"values": True}),
    ],
)
def test_a_notebook_draws_the_picture_export_draws(
    runner, tmp_path, suffix, options, view, choice, style
):
    flags = {"cmap": "--cmap", "title": "--title"}
    styled = [part for name, value in style.items() for part in (flags.get(name), value)]
    styled = ["--values"] if style.get("values") else styled
    exported = tmp_path / f"cli.{suffix}"
    arguments = ["export", TEXT, "--view", view, *options, *styled, "-o", str(exported)]
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    maps = attnviz.extract(TEXT)  # every layer and head: the picture selects
    picture = maps.picture(view, suffix, **choice, **style)
    assert picture.data == exported.read_bytes()
    saved = tmp_path / f"saved.{suffix}"
    maps.save(saved, view, **choice, **style)
    assert saved.read_bytes() == exported.read_bytes()
    # A notebook shows PNG and SVG inline; PDF only as a file.
    assert picture._repr_png_() == (picture.data if suffix == "png" else None)
    assert picture._repr_svg_() == (picture.data.decode() if suffix == "svg" else None)
    # Its text is what it is, not its bytes (a model view's PNG is megabytes).
    assert repr(picture) == f"<Picture {suffix}, {len(picture.data):,} bytes>"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"view": "head"}, "the head view draws one map, but these maps hold 8"),
        ({"view": "layer"}, "the layer view draws one layer, but these maps hold 2"),
        ({"view": "layer", "layer": 2}, "layer 2 is not held: these maps hold layers [0, 1]"),
        ({"view": "grid"}, "unknown view 'grid': choose one of head, layer, model"),
        ({"format": "gif"}, "unknown picture format 'gif': choose one of png, svg, pdf"),
        ({"vmax": 0}, "vmax 0 is outside the weights' range"),
        ({"figsize": (3, 0)}, "figsize (3, 0)"),
        ({"cmap": "nope"}, "unknown colormap 'nope'"),
    ],
)
def test_a_picture_request_that_cannot_be_drawn_is_a_usage_error(call, message):
    maps = attnviz.extract(TEXT)
    with pytest.raises(attnviz.UsageError) as raised:
        maps.picture(**call)
    assert message in str(raised.value)


def test_an_aggregate_is_drawn_whole_not_picked_from():
    rollout = attnviz.extract(TEXT).aggregated("rollout")
    assert rollout.picture("head").data.startswith(b"\x89PNG")  # one map: the head view
    with pytest.raises(attnviz.UsageError, match="pick layers and heads before aggregating"):
        rollout.picture("head", layer=0)


def test_saving_to_a_name_with_no_picture_format_writes_nothing(tmp_path):
    with pytest.raises(
        attnviz.UsageError,
        match=r"name it \.png, \.svg, \.pdf, \.html, \.json, \.ndjson, \.npz or \.csv",
    ):
        attnviz.extract(TEXT).save(tmp_path / "maps.gif")
    assert not list(tmp_path.iterdir())
