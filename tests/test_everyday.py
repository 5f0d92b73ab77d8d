"""Everyday use (issue 16): every head on one screen, the heads worth looking at first,
figures ready for a paper, labels that tell tokens apart."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from rich.cells import cell_len

import attnviz
from attnviz.analysis.heads import TopHeads, head_statistics, sort_rows
from attnviz.choices import HeadColumn, Output, RankBy
from attnviz.cli import app
from attnviz.cli.output import Environment
from attnviz.render.canvas import GridCanvas, HeadCanvas
from attnviz.render.layout import grid_shape
from attnviz.render.style import MIN_LABEL_POINTS, Style
from attnviz.render.terminal import choose_thumbnails, render_grid

TERMINAL = Environment(stdout_is_terminal=True, stderr_is_terminal=False)
SENTENCE = "The cat sat on the mat because the mat was warm"


@pytest.mark.slow
@pytest.mark.minilm
def test_all_72_minilm_heads_fit_one_120_by_40_terminal(runner, snapshot, monkeypatch):
    monkeypatch.setenv("LINES", "40")
    arguments = ["show", "--model", "minilm", SENTENCE, "--width", "120", "--color", "never"]
    result = runner.invoke(app, arguments, obj=TERMINAL)  # --view auto: panels do not fit
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= 40 and max(cell_len(line) for line in lines) <= 120
    assert all(f"L{layer}" in result.stdout for layer in range(6))
    assert all(f"H{head}" in lines[1] for head in range(12))
    snapshot("show_minilm_grid_120x40.txt", result.stdout)
    panels = runner.invoke(app, [*arguments, "--view", "panels"], obj=TERMINAL)
    assert len(panels.stdout.splitlines()) > 40  # why the grid was chosen
    assert panels.stdout.count("╭") >= 72


def test_auto_keeps_panels_that_fit_and_pipes_get_panels(runner, monkeypatch):
    monkeypatch.setenv("LINES", "200")
    arguments = ["show", "Hello I love you", "--width", "120", "--color", "never"]
    on_screen = runner.invoke(app, arguments, obj=TERMINAL)
    assert on_screen.stdout.count("╭") == 8  # 2 layers × 4 heads, all full panels
    monkeypatch.setenv("LINES", "10")
    piped = runner.invoke(app, [*arguments, "-f", "terminal"])  # no screen: no height
    assert piped.stdout.count("╭") == 8
    gridded = runner.invoke(app, arguments, obj=TERMINAL)
    assert "╭" not in gridded.stdout and "L1" in gridded.stdout


@pytest.mark.parametrize("colour", [True, False])
@pytest.mark.parametrize("tokens", [3, 12, 40, 300])
def test_grid_fits_any_length_in_the_width_and_height(colour, tokens):
    from rich.console import Console

    text = " ".join(f"w{i}" for i in range(tokens))
    maps = attnviz.extract(
        text, config=attnviz.BuiltinConfig(num_layers=6, num_heads=12, d_model=96)
    )
    console = Console(width=120, record=True, color_system="truecolor" if colour else None)
    console.print(render_grid(maps, width=120, height=40, use_colour=colour))
    lines = console.export_text().splitlines()
    assert len(lines) <= 40 and max(cell_len(line) for line in lines) <= 120


def test_thumbnails_pool_what_does_not_fit_and_grow_what_is_small():
    small = choose_thumbnails(3, 3, width=8, lines=5, colour=True)
    assert (small.pool, small.grow) == (1, 2)  # 3 tokens drawn 2 pixels each
    assert small.size(3, 3) == (6, 3)
    large = choose_thumbnails(100, 100, width=8, lines=5, colour=True)
    assert large.pool == 13 and large.size(100, 100)[0] <= 8
    shaded = choose_thumbnails(100, 100, width=8, lines=5, colour=False)
    assert shaded.size(100, 100)[0] <= 8 and shaded.size(100, 100)[1] <= 5


def test_grid_thumbnail_shades_follow_the_weights():
    weights = np.zeros((1, 2, 2, 2), dtype=np.float32)
    weights[0, 0] = [[1, 0], [1, 0]]  # head 0: everything on the first key
    weights[0, 1] = [[0, 1], [0, 1]]  # head 1: everything on the second
    maps = attnviz.AttentionMaps(["a", "b"], ["a", "b"], weights, [0], [0, 1], "self", "m")
    from rich.console import Console

    console = Console(width=40, record=True, color_system=None)
    console.print(render_grid(maps, width=40, height=None, use_colour=False))
    lines = console.export_text().splitlines()
    (header,) = [line for line in lines if "H0" in line]
    (first_row,) = [line for line in lines if line.startswith("L0")]
    start, step = header.index("H0"), header.index("H1") - header.index("H0")
    first_row = first_row.ljust(start + 2 * step)
    head0, head1 = (
        first_row[start : start + step - 1],
        first_row[start + step : start + 2 * step - 1],
    )
    half = len(head0) // 2
    assert set(head0[:half]) == {"█"} and set(head0[half:]) == {" "}  # blank: exactly zero
    assert set(head1[:half]) == {" "} and set(head1[half:]) == {"█"}


@pytest.mark.parametrize("by", list(RankBy))
@pytest.mark.parametrize("lowest", [False, True])
def test_top_heads_agree_with_heads_sort(runner, by, lowest):
    arguments = ["Hello I love you", "--num-layers", "3", "--num-heads", "4"]
    arguments += ["--span", "love"] if by is RankBy.SPAN else []
    listed = runner.invoke(
        app,
        ["heads", *arguments, "--sort", by.value, "-f", "json", *(["--reverse"] if lowest else [])],
    )
    expected = [(row["layer"], row["head"]) for row in json.loads(listed.stdout)["heads"][:3]]
    drawn = runner.invoke(
        app,
        ["show", *arguments, "--top-heads", "3", "--by", by.value, "--color", "never"]
        + (["--lowest"] if lowest else []),
    )
    assert drawn.exit_code == 0, drawn.stderr
    titles = [line for line in drawn.stdout.splitlines() if "╭" in line]
    shown = [(int(layer), int(head)) for line in titles for layer, head in _layer_heads(line)]
    assert shown == expected


def _layer_heads(line: str):
    import re

    return re.findall(r"layer (\d+) · head (\d+)", line)


def test_top_heads_panels_are_the_ranked_maps_themselves():
    maps = attnviz.extract("the cat sat on the mat", mode="masked")
    ranked = sort_rows(head_statistics(maps), HeadColumn.SINK)
    panels = TopHeads(2, RankBy.SINK).panels(maps)
    assert [(p.layer, p.head) for p in panels] == [(r.layer, r.head) for r in ranked[:2]]
    for panel in panels:
        np.testing.assert_array_equal(panel.matrix, maps.head(panel.layer, panel.head))
        assert f"sink {ranked[0].sink:.3f}" in panels[0].title


def test_top_heads_in_export_and_batch_draw_only_those(runner, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("Hello I love you\nthe cat sat\n")
    result = runner.invoke(
        app,
        ["batch", str(text), "-o", str(tmp_path / "b"), "--top-heads", "2", "--by", "self", "-q"],
    )
    assert result.exit_code == 0, result.stderr
    for stem in ("0000-hello-i-love-you", "0001-the-cat-sat"):
        files = sorted(path.name for path in (tmp_path / "b").glob(f"{stem}-L*.png"))
        maps = attnviz.extract(stem.split("-", 1)[1].replace("-", " "))
        expected = [
            f"{stem}-L{p.layer}-H{p.head}.png" for p in TopHeads(2, RankBy.SELF).panels(maps)
        ]
        assert files == sorted(expected)
    picture = runner.invoke(
        app, ["export", "Hello I love you", "-o", str(tmp_path / "x.png"), "--top-heads", "1",
              "--view", "head"],
    )  # fmt: skip
    assert picture.exit_code == 0, picture.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["show", "a b", "--top-heads", "2", "-f", "json"], "--top-heads applies to the"),
        (["show", "a b", "--top-heads", "2", "-a", "mean"], "--top-heads picks heads"),
        (["show", "a b", "-m", "cross", "-t", "c d", "--top-heads", "1", "--by", "self"], "cross"),
        (["show", "a b", "--view", "grid", "-f", "csv"], "--view grid applies to the"),
        (["show", "a b", "--values", "-o", "x.npz"], "not npz output: leave it out"),
        (["show", "a b", "--label-positions", "-f", "json"], "keep the tokens as they are"),
        (["show", "a b", "--dtype", "float16", "-f", "terminal"], "applies to data"),
        (["show", "a b", "--dtype", "float16", "-o", "x.png"], "not a png picture"),
        (["export", "a b", "-o", "x.png", "--figsize", "3"], "give width and height"),
        (["export", "a b", "-o", "x.png", "--figsize", "-1,2"], "between 0 and 100"),
        (["export", "a b", "-o", "x.png", "--figsize", "1,1", "--view", "head", "-l", "0",
          "--head", "0"], "leaves no room for the map"),
        (["export", "a b", "-o", "x.png", "--title", "T", "--no-title"], "pick one"),
        (["export", "a b", "-o", "x.png", "--top-heads", "2", "--view", "head"], "draws one map"),
    ],
)  # fmt: skip
def test_bad_choices_are_usage_errors(runner, tmp_path, monkeypatch, arguments, message):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "x.png").exists()


def test_picture_styling_where_no_picture_file_is_drawn_is_refused(runner, tmp_path):
    """--cmap, --dpi, --figsize, --font-size, --vmax and (but in the terminal) --values
    were dropped unsaid for the page, the terminal and data; so were batch's
    --label-positions for data only and --dtype for pictures only."""
    saved, source = tmp_path / "maps.json", tmp_path / "in.txt"
    saved.write_text(json.dumps(attnviz.extract("a b").to_dict()))
    source.write_text("a b\n")
    page = str(tmp_path / "x.html")
    cases = [
        (["export", "a b", "-o", page, "--cmap", "magma"], "--cmap applies to png, svg and pdf"
         " pictures, not the interactive page: leave it out"),
        (["render", saved, "-o", page, "--figsize", "4x3", "--dpi", "200"], "--dpi applies to"),
        (["render", saved, "--font-size", "9", "--values"], "--font-size applies to png, svg and"
         " pdf pictures, not the terminal picture"),
        (["batch", source, "-o", tmp_path / "out", "-f", "json", "-f", "html", "--vmax", "0.5"],
         "--vmax applies to png, svg and pdf pictures, not json output and the interactive page"),
        (["batch", source, "-o", tmp_path / "out", "-f", "npz", "--label-positions"],
         "--label-positions applies to the terminal picture, csv output, png, svg and pdf "
         "pictures and the interactive page, not npz output"),
        (["batch", source, "-o", tmp_path / "out", "-f", "svg", "--dtype", "float16"],
         "--dtype float16 applies to data (json, ndjson, npz, csv), not an svg picture"),
    ]  # fmt: skip
    for arguments, message in cases:
        result = runner.invoke(app, [str(argument) for argument in arguments])
        assert result.exit_code == 2 and result.stdout == "", result.stderr
        assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "maps.json"]
    titled = runner.invoke(app, ["export", "a b", "-o", page, "--title", "T"])
    assert titled.exit_code == 0 and "T" in (tmp_path / "x.html").read_text()
    valued = runner.invoke(app, ["render", str(saved), "--values", "-l", "0", "--head", "0"])
    assert valued.exit_code == 0 and "layer 0 · head 0" in valued.stdout


def _texts(figure):
    from matplotlib.text import Text

    return [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("tokens", [4, 30, 120])
@pytest.mark.parametrize("figsize", [None, (3.5, 3.0)])
def test_model_view_labels_never_go_below_the_minimum(tokens, figsize):
    text = " ".join(f"w{i}" for i in range(tokens))
    maps = attnviz.extract(text)
    canvas = GridCanvas(grid_shape(maps, None), Style(figsize=figsize))
    figure = canvas.whole(maps, list(maps.panels()))
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
    figure = canvas.whole(maps, list(maps.panels()))
    assert tuple(figure.get_size_inches()) == (7, 4)
    assert canvas.header.get_text() == "Figure 2"
    headers = [*canvas.titles[:4], *canvas.row_headers]  # the heads' and the layers' names
    assert all(MIN_LABEL_POINTS <= t.get_fontsize() <= 11 and t.get_text() for t in headers)
    bar = figure.axes[-1]
    assert "0.5" in bar.get_ylabel()  # the bar says weights above vmax are clipped
    untitled = GridCanvas(grid_shape(maps, None), Style(title=""))
    untitled.whole(maps, list(maps.panels()))
    assert untitled.header.get_text() == "" and untitled.titles[0].get_text()  # panels keep theirs


@pytest.mark.parametrize(
    ("figsize", "short"), [(None, False), ((9, 5), False), ((5, 4), True), ((4.5, 3), True)]
)
def test_panel_titles_fit_their_panels_in_one_size_and_form(figsize, short):
    config = attnviz.BuiltinConfig(num_layers=1, num_heads=12, d_model=96)
    maps = attnviz.extract("The man walked the dog", config=config)  # two rows of 6 heads
    canvas = GridCanvas(grid_shape(maps, None), Style(figsize=figsize, font_size=9))
    figure = canvas.whole(maps, list(maps.panels()))
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
    figure = canvas.whole(maps, list(maps.panels()))
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


@pytest.mark.parametrize("panels", ["all", "chosen"])
def test_the_grids_fast_path_is_what_matplotlib_draws(panels):
    import io

    from PIL import Image

    maps = attnviz.extract("The cat sat on the mat", config=attnviz.BuiltinConfig(num_layers=3))
    chosen = list(maps.panels()) if panels == "all" else TopHeads(5, RankBy.SINK).panels(maps)
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
    panels = list(maps.panels())
    canvas = GridCanvas(grid_shape(maps, None), Style(figsize=(7, 4.5), font_size=7))
    fast = np.asarray(Image.open(io.BytesIO(canvas.png(maps, panels))).convert("RGB"), int)
    whole = io.BytesIO()
    canvas.whole(maps, panels).savefig(whole, format="png")
    full = np.asarray(Image.open(whole).convert("RGB"), int)
    room = int(np.ceil(canvas.label_room * 100))
    for row in range(6):  # the query labels left of each row, and around them
        xs, ys = canvas.pixels_of[row * 12]
        strip = (slice(ys[0] - 12, ys[-1] + 12), slice(xs[0] - room, xs[0]))
        assert (np.abs(fast[strip] - full[strip]).max(-1) > 40).sum() == 0, row


def test_head_picture_with_figsize_has_that_size_and_fits_its_title(runner, tmp_path):
    from PIL import Image

    out = tmp_path / "h.png"
    result = runner.invoke(
        app, ["export", "Hello I love you", "-o", str(out), "--view", "head", "-l", "0",
              "--head", "0", "--figsize", "3.5,3", "--dpi", "100", "--title", "A long title " * 3],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert Image.open(out).size == (350, 300)


@pytest.mark.parametrize("words", [["a", "b", "c"], ["representations"] * 3])
def test_a_given_figure_size_gives_the_cells_what_this_inputs_labels_leave(words):
    from attnviz.render.image import Painter
    from attnviz.render.style import Frame

    maps = attnviz.extract(" ".join(words * 4), layers=0, heads=0)
    style = Style(figsize=(3.5, 3.0), font_size=8)
    painter = Painter()
    painter.head_picture(maps, next(maps.panels()), Output.PNG, style)
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


def test_label_positions_tell_repeated_tokens_apart(runner):
    maps = attnviz.extract("the man saw the dog").with_positions()
    assert maps.query_tokens == ["the·0", "man", "saw", "the·3", "dog"]
    shown = runner.invoke(app, ["show", "the man saw the dog", "--label-positions", "-l", "0",
                                "--head", "0", "--color", "never"])  # fmt: skip
    assert "the·0" in shown.stdout and "the·3" in shown.stdout
    table = runner.invoke(app, ["show", "the man saw the dog", "--label-positions", "-f", "csv"])
    assert ",the·3," in table.stdout


def test_raw_pieces_keep_the_tokenizers_spelling(tiny):
    extractor = attnviz.load(str(tiny["bert"]))
    cleaned = extractor.extract("unbelievable tokenization", layers=0)
    raw = extractor.extract("unbelievable tokenization", layers=0, raw_pieces=True)
    assert any(token.startswith("##") for token in raw.query_tokens)
    assert not any(token.startswith("##") for token in cleaned.query_tokens)
    np.testing.assert_array_equal(raw.weights, cleaned.weights)


@pytest.mark.parametrize("tokens", [4, 300])
def test_single_head_labels_never_go_below_the_minimum(tokens):

    canvas = HeadCanvas(tokens, tokens, Style())
    labels = [*canvas.key_labels, *canvas.query_labels]
    assert min(label.get_fontsize() for label in labels) >= MIN_LABEL_POINTS
    thinned = len(canvas.key_labels) < tokens
    notes = [t.get_text() for t in canvas.figure.texts]
    assert thinned == any("labels: one token in" in note for note in notes)


def test_explain_labels_raw_pieces_too(tiny):
    extractor = attnviz.load(str(tiny["bert"]))
    raw = json.dumps(extractor.explain("unbelievable tokenization", raw_pieces=True).to_dict())
    cleaned = json.dumps(extractor.explain("unbelievable tokenization").to_dict())
    assert "##" in raw and "##" not in cleaned
