"""Pictures (the Painter and its canvases, and a notebook's): the expected size, labels
that fit, the fast path equal to what matplotlib draws, and clear errors. The export
command's own tests are in test_export.py."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from PIL import Image

import attnviz
from attnviz.analysis.heads import TopHeads
from attnviz.choices import Output, View
from attnviz.cli import app
from attnviz.head_columns import RankBy
from attnviz.panels import panels_of, query_labels_of
from attnviz.render.canvas import HeadCanvas
from attnviz.render.grid_canvas import GridCanvas
from attnviz.render.image import Painter
from attnviz.render.layout import grid_shape
from attnviz.render.png import encode_png
from attnviz.render.style import MIN_LABEL_POINTS, Style

TEXT = "The man walked the dog"


def test_fast_png_matches_a_full_matplotlib_draw():
    """The fast path paints cells; matplotlib drawing the whole figure is the reference."""
    import io

    import numpy as np

    from attnviz.render.style import Frame

    maps = attnviz.extract(TEXT, layers=0, heads=0)
    panel = next(panels_of(maps))
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
    from attnviz.outputs import DATA, PICTURES, suffixes_of

    files = suffixes_of((*PICTURES, Output.HTML, *DATA))  # what the table lists
    assert files.startswith(".png, .svg, .pdf, .html, .json, .ndjson, .npz") and ".csv" in files
    with pytest.raises(attnviz.UsageError, match=f"name it {files}$"):
        attnviz.extract(TEXT).save(tmp_path / "maps.gif")
    assert not list(tmp_path.iterdir())


def test_pdfs_embed_truetype_fonts_not_type3():
    maps = attnviz.extract("Hello I love you", layers=0, heads=0)
    for view in (View.HEAD, View.MODEL):
        (_, pdf), *_ = Painter().files(maps, view, Output.PDF, Style())
        subtypes = set(re.findall(rb"/Subtype\s*/(\w+)", pdf))
        assert b"Type3" not in subtypes and b"CIDFontType2" in subtypes  # TrueType glyphs


@pytest.mark.parametrize("text", ["Hello I love you", "a", "a " * 60])
def test_a_pictures_header_and_title_lie_inside_the_canvas(text):
    from attnviz.render.canvas import HeadCanvas
    from attnviz.render.style import Frame

    maps = attnviz.extract(text, layers=0, heads=0)
    panel = next(panels_of(maps))
    queries, keys = len(maps.query_tokens), len(maps.key_tokens)
    canvas = HeadCanvas(queries, keys, Style())
    frame = Frame(
        f"{maps.model} · self attention", tuple(maps.query_tokens), tuple(maps.key_tokens)
    )
    canvas.png(panel.matrix, frame, panel.title)
    renderer = canvas.canvas.get_renderer()
    figure = canvas.figure.bbox
    for artist in (canvas.header, canvas.title):
        extent = artist.get_window_extent(renderer)
        assert figure.x0 <= extent.x0 and extent.x1 <= figure.x1, artist.get_text()
        assert figure.y0 <= extent.y0 and extent.y1 <= figure.y1
    assert canvas.header.get_text().startswith("builtin:")
    # The rows/columns note sits just under the grid's corner, left of the key labels.
    (note,) = [t for t in canvas.figure.texts if t.get_text().startswith("rows:")]
    note_extent, grid = note.get_window_extent(renderer), canvas.axes.get_window_extent()
    assert note_extent.x1 <= grid.x0 and grid.y0 - 0.3 * 100 <= note_extent.y1 <= grid.y0


@pytest.mark.parametrize("tokens", [4, 30, 120])
@pytest.mark.parametrize("figsize", [None, (3.5, 3.0)])
def test_model_view_labels_never_go_below_the_minimum(tokens, figsize):
    text = " ".join(f"w{i}" for i in range(tokens))
    maps = attnviz.extract(text)
    canvas = GridCanvas(grid_shape(maps, None), Style(figsize=figsize))
    figure = canvas.whole(maps, list(panels_of(maps)))
    figure.canvas.draw()
    sizes = [t.get_fontsize() for t in _texts(figure)]
    assert min(sizes) >= MIN_LABEL_POINTS
    column_labels = next(columns for _, columns in canvas.labels if columns)
    if len(column_labels) < tokens:  # thinned: the picture says so
        assert any("labels: one token in" in t.get_text() for t in _texts(figure))


def test_paper_options_reach_the_figure():
    maps = attnviz.extract("Hello I love you")
    style = Style(figsize=(7, 4), font_size=11, title="Figure 2", vmax=0.5)
    canvas = GridCanvas(grid_shape(maps, None), style)
    figure = canvas.whole(maps, list(panels_of(maps)))
    assert tuple(figure.get_size_inches()) == (7, 4)
    assert canvas.header.get_text() == "Figure 2"
    headers = [*canvas.titles[:4], *canvas.row_headers]  # the heads' and the layers' names
    assert all(MIN_LABEL_POINTS <= t.get_fontsize() <= 11 and t.get_text() for t in headers)
    bar = figure.axes[-1]
    assert "0.5" in bar.get_ylabel()  # the bar says weights above vmax are clipped
    untitled = GridCanvas(grid_shape(maps, None), Style(title=""))
    untitled.whole(maps, list(panels_of(maps)))
    assert untitled.header.get_text() == "" and untitled.titles[0].get_text()  # panels keep theirs


@pytest.mark.parametrize(
    ("figsize", "short"), [(None, False), ((9, 5), False), ((5, 4), True), ((4.5, 3), True)]
)
def test_panel_titles_fit_their_panels_in_one_size_and_form(figsize, short):
    config = attnviz.BuiltinConfig(num_layers=1, num_heads=12, d_model=96)
    maps = attnviz.extract("The man walked the dog", config=config)  # two rows of 6 heads
    canvas = GridCanvas(grid_shape(maps, None), Style(figsize=figsize, font_size=9))
    figure = canvas.whole(maps, list(panels_of(maps)))
    renderer = figure.canvas.get_renderer()
    titles = [title.get_text() for title in canvas.titles]
    assert titles[11] == ("L0 H11" if short else "layer 0 · head 11")  # never cut
    assert len({title.get_fontsize() for title in canvas.titles}) == 1
    for row in range(2):  # no title runs into its neighbour's
        boxes = [title.get_window_extent(renderer) for title in canvas.titles[row * 6 :][:6]]
        assert all(left.x1 < right.x0 for left, right in itertools.pairwise(boxes))


def test_a_model_view_names_heads_over_its_columns_and_layers_beside_its_rows():
    config = attnviz.BuiltinConfig(num_layers=3, num_heads=4)
    maps = attnviz.extract("The man walked the dog", config=config, layers="1-2")
    canvas = GridCanvas(grid_shape(maps, None), Style())
    figure = canvas.whole(maps, list(panels_of(maps)))
    renderer = figure.canvas.get_renderer()
    assert [title.get_text() for title in canvas.titles] == [
        *(f"head {head}" for head in range(4)),
        *[""] * 4,  # the second row's heads are the first row's
    ]
    assert [header.get_text() for header in canvas.row_headers] == ["layer 1", "layer 2"]
    for header, n in zip(canvas.row_headers, (0, 4), strict=True):  # beside its row's labels
        box, labels = header.get_window_extent(renderer), canvas.labels[n][0]
        assert box.x1 < min(label.get_window_extent(renderer).x0 for label in labels)
        _, _, y0, y1 = canvas.boxes[n]
        assert y0 < (box.y0 + box.y1) / 2 / canvas.style.dpi < y1
    one_layer = GridCanvas(grid_shape(maps.select(layers=[1]), None), Style())
    assert not one_layer.row_headers  # one layer's heads keep their titles


def test_a_single_untitled_panel_keeps_its_labels():
    maps = attnviz.extract("The man walked the dog")
    chosen = TopHeads(1, RankBy.SINK).panels(maps)
    canvas = GridCanvas(grid_shape(maps, chosen), Style(title=""))
    canvas.whole(maps, chosen)
    rows, columns = canvas.labels[0]
    assert [label.get_text() for label in rows] == maps.query_tokens
    assert [label.get_text() for label in columns] == maps.key_tokens
    assert canvas.titles[0].get_text() == ""


LONG = " ".join(f"w{i}" for i in range(400))


@pytest.mark.parametrize("rows", ["last", "0-2"])
def test_a_few_rows_over_many_keys_are_a_strip_tall_enough_to_see(rows):
    """--rows last over a long text: a strip at least MIN_MAP_SIDE tall (a row's cells
    up to HEAD_CELL), not a line one pixel high; the fast path still what matplotlib draws."""
    import io

    from attnviz.render.layout import HEAD_CELL, MIN_MAP_SIDE
    from attnviz.render.style import Frame

    maps = attnviz.extract(LONG, rows=rows, layers=0, heads=0)
    panel = next(panels_of(maps))
    queries, keys = panel.matrix.shape
    frame = Frame("header", tuple(query_labels_of(maps)), tuple(maps.key_tokens))
    style = Style()
    canvas = HeadCanvas(queries, keys, style)
    tall = min(MIN_MAP_SIDE, queries * HEAD_CELL) * style.dpi
    assert canvas.y[-1] - canvas.y[0] >= tall - 1
    assert canvas.x[-1] - canvas.x[0] > 3 * (canvas.y[-1] - canvas.y[0])  # still a strip
    fast = canvas.png(panel.matrix, frame, panel.title)
    full = canvas.vector(panel.matrix, frame, panel.title, attnviz.Output.PNG)
    fast_pixels = np.asarray(Image.open(io.BytesIO(fast)).convert("RGB"), int)
    full_pixels = np.asarray(Image.open(io.BytesIO(full)).convert("RGB"), int)
    ys, xs = (canvas.y[:-1] + canvas.y[1:]) // 2, (canvas.x[:-1] + canvas.x[1:]) // 2
    # Cells two or three pixels wide: matplotlib's edge pixels blend a little.
    assert np.abs(fast_pixels[ys][:, xs] - full_pixels[ys][:, xs]).max() <= 8
    assert len([label for label in canvas.query_labels]) == queries  # every row labelled
    grid = GridCanvas(grid_shape(maps, None), style)
    (xs, ys), *_ = grid.pixels_of
    assert ys[-1] - ys[0] >= min(MIN_MAP_SIDE, queries * 0.25) * style.dpi - 1


@pytest.mark.parametrize("tokens", [20, 400, 1600])
def test_strips_are_stacked_as_many_across_as_fit_a_page_width(tokens):
    """Every head's last row over a long text: strips side by side only while they fit
    about GRID_WIDTH inches, each titled; maps of any other shape keep a row per layer."""
    from attnviz.render.layout import GRID_WIDTH, grid_layout

    text = " ".join(f"w{i}" for i in range(tokens))
    config = attnviz.BuiltinConfig(num_layers=3, num_heads=4)
    strips = grid_shape(attnviz.extract(text, rows="last", config=config), None)
    layout = grid_layout(strips, Style())
    assert (
        strips.count == 12
        and strips.rows * strips.columns >= 12 > (strips.rows - 1) * strips.columns
    )
    across = strips.columns * layout.panel_width  # panels a whole pixel apart: within 0.1
    assert strips.columns == 1 or across <= GRID_WIDTH + 0.1  # never wider than a page
    assert strips.columns == 12 or across + layout.panel_width > GRID_WIDTH - 0.1  # as many
    assert not strips.headers
    whole = grid_shape(attnviz.extract(text, config=config), None)
    assert (whole.rows, whole.columns, whole.headers) == (3, 4, True)


@pytest.mark.parametrize("panels", ["all", "chosen"])
def test_the_grids_fast_path_is_what_matplotlib_draws(panels):
    import io

    from PIL import Image

    maps = attnviz.extract("The cat sat on the mat", config=attnviz.BuiltinConfig(num_layers=3))
    chosen = list(panels_of(maps)) if panels == "all" else TopHeads(5, RankBy.SINK).panels(maps)
    canvas = GridCanvas(grid_shape(maps, None if panels == "all" else chosen), Style())
    fast = np.asarray(Image.open(io.BytesIO(canvas.png(maps, chosen))).convert("RGB"), int)
    whole = io.BytesIO()
    canvas.whole(maps, chosen).savefig(whole, format="png")
    full = np.asarray(Image.open(whole).convert("RGB"), int)
    assert fast.shape == full.shape
    for panel, (xs, ys) in zip(chosen, canvas.pixels_of, strict=False):  # every cell's centre
        centres = fast[(ys[:-1] + ys[1:]) // 2][:, (xs[:-1] + xs[1:]) // 2]
        expected = full[(ys[:-1] + ys[1:]) // 2][:, (xs[:-1] + xs[1:]) // 2]
        assert np.abs(centres - expected).max() <= 2, panel.title
    # labels pasted from the first panel, titles, header, colour bar: the same pixels
    assert (np.abs(fast - full).max(-1) > 8).mean() < 0.01


def test_labels_taller_than_their_cells_are_pasted_whole():
    """In a small grid the labels reach past their cells: each row's pasted labels are
    what matplotlib draws there, not cut at the cells' ends."""
    import io

    from PIL import Image

    config = attnviz.BuiltinConfig(num_layers=6, num_heads=12, d_model=96)
    maps = attnviz.extract("The cat sat on the mat", config=config)
    panels = list(panels_of(maps))
    canvas = GridCanvas(grid_shape(maps, None), Style(figsize=(7, 4.5), font_size=7))
    fast = np.asarray(Image.open(io.BytesIO(canvas.png(maps, panels))).convert("RGB"), int)
    whole = io.BytesIO()
    canvas.whole(maps, panels).savefig(whole, format="png")
    full = np.asarray(Image.open(whole).convert("RGB"), int)
    room = int(np.ceil(canvas.layout.label_room * 100))
    for row in range(6):  # the query labels left of each row, and around them
        xs, ys = canvas.pixels_of[row * 12]
        strip = (slice(ys[0] - 12, ys[-1] + 12), slice(xs[0] - room, xs[0]))
        assert (np.abs(fast[strip] - full[strip]).max(-1) > 40).sum() == 0, row


@pytest.mark.parametrize("words", [["a", "b", "c"], ["representations"] * 3])
def test_a_given_figure_size_gives_the_cells_what_this_inputs_labels_leave(words):
    from attnviz.render.image import Painter
    from attnviz.render.style import Frame

    maps = attnviz.extract(" ".join(words * 4), layers=0, heads=0)
    style = Style(figsize=(3.5, 3.0), font_size=8)
    painter = Painter()
    painter.head_picture(maps, next(panels_of(maps)), Output.PNG, style)
    ((_, canvas),) = painter.canvases.items()
    labels = (*maps.query_tokens, *maps.key_tokens)
    canvas._set_frame(Frame("header", tuple(maps.query_tokens), tuple(maps.key_tokens)))
    canvas.canvas.draw()
    renderer = canvas.canvas.get_renderer()
    cells = canvas.axes.get_window_extent(renderer)
    figure = canvas.figure.bbox
    note = next(t for t in canvas.figure.texts if "rows: query tokens" in t.get_text())
    for label in [*canvas.query_labels, *canvas.key_labels]:  # inside, apart from the note
        box = label.get_window_extent(renderer)
        assert box.x0 >= figure.x0 and box.y0 >= note.get_window_extent(renderer).y1
    assert cells.y0 > box.y1  # the key labels under the cells
    tokens = len(maps.query_tokens)
    for_any_label = HeadCanvas(tokens, tokens, style)  # room for the longest label there is

    def cells_height(canvas: HeadCanvas) -> float:
        return canvas.axes.get_position().height * canvas.figure.get_figheight()

    short = max(map(len, labels)) < 10
    assert (cells_height(canvas) > 1.2 * cells_height(for_any_label)) == short


@pytest.mark.parametrize("tokens", [4, 300])
def test_single_head_labels_never_go_below_the_minimum(tokens):

    canvas = HeadCanvas(tokens, tokens, Style())
    labels = [*canvas.key_labels, *canvas.query_labels]
    assert min(label.get_fontsize() for label in labels) >= MIN_LABEL_POINTS
    thinned = len(canvas.key_labels) < tokens
    notes = [t.get_text() for t in canvas.figure.texts]
    assert thinned == any("labels: one token in" in note for note in notes)


def _texts(figure):
    from matplotlib.text import Text

    return [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]
