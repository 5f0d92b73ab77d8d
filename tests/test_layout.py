"""The pictures' layout arithmetic, on its own: no matplotlib, only inches and pixels."""

from __future__ import annotations

import itertools
import math

import pytest

from attnviz.errors import UsageError
from attnviz.render.layout import (
    GRID_CELL,
    HEAD_CELL,
    MARGIN_RIGHT,
    MARGIN_TOP,
    MIN_MAP_SIDE,
    GridShape,
    grid_layout,
    head_figure_size,
    head_layout,
    head_margins,
    label_step,
    labels_for,
)
from attnviz.render.style import MIN_LABEL_POINTS, Style

SIZES = [(1, 1), (3, 7), (12, 12), (40, 9), (300, 300)]


def inside(box: tuple[float, float, float, float]) -> bool:
    x, y, width, height = box
    return x >= 0 and y >= 0 and x + width <= 1 + 1e-9 and y + height <= 1 + 1e-9


@pytest.mark.parametrize(("queries", "keys"), SIZES)
def test_a_map_sized_by_its_tokens_has_square_cells_in_fixed_margins(queries, keys):
    layout = head_layout(queries, keys, Style())
    assert (layout.width, layout.height) == head_figure_size(queries, keys)
    assert inside(layout.cells_box) and inside(layout.bar_box)
    x, y, width, height = layout.cells_box
    assert layout.cell_width == layout.cell_height
    assert width * layout.width == pytest.approx(keys * layout.cell_width)
    assert height * layout.height == pytest.approx(queries * layout.cell_height)
    bar_x, bar_y, _, bar_height = layout.bar_box
    assert bar_x > x + width and (bar_y, bar_height) == (y, height)  # beside, as tall
    assert 0 < layout.note_top < layout.bottom


@pytest.mark.parametrize(("queries", "keys"), SIZES[:4])
@pytest.mark.parametrize("figsize", [(3.5, 3.0), (7.0, 2.5), (2.5, 7.0)])
def test_a_given_size_is_kept_and_the_map_centred_where_its_cells_leave_room(
    queries, keys, figsize
):
    style = Style(figsize=figsize, font_size=8)
    layout = head_layout(queries, keys, style, label_chars=5)
    assert (layout.width, layout.height) == figsize and inside(layout.cells_box)
    left, bottom = head_margins(style, 5)
    assert layout.cell_width == layout.cell_height
    right = layout.width - layout.left - keys * layout.cell_width - MARGIN_RIGHT
    top = layout.height - layout.bottom - queries * layout.cell_height - MARGIN_TOP
    # Spare room is shared on both sides of the map, and the cells fill one direction.
    assert layout.left - left == pytest.approx(right) and right >= -1e-9
    assert layout.bottom - bottom == pytest.approx(top) and top >= -1e-9
    assert min(right, top) == pytest.approx(0, abs=1e-9)


STRIPS = [(1, 1517), (3, 2000), (12, 4000), (2000, 2)]


@pytest.mark.parametrize(("queries", "keys"), STRIPS)
@pytest.mark.parametrize("figsize", [None, (8.0, 3.0)])
def test_a_few_tokens_beside_many_are_a_strip_not_a_line(queries, keys, figsize):
    """The last token's row over thousands of keys (--rows last): its cells are as wide
    as ever and as tall as a readable strip needs, never taller than the map is wide."""
    style = Style(figsize=figsize)
    layout = head_layout(queries, keys, style)
    few, many = sorted([(queries, layout.cell_height), (keys, layout.cell_width)])
    short, long = few[0] * few[1], many[0] * many[1]
    assert min(MIN_MAP_SIDE, few[0] * HEAD_CELL) - 1e-9 <= short <= long + 1e-9
    assert inside(layout.cells_box)  # a given size has room for the strip: within it
    labels = layout.labels  # the short side's labels are not thinned as the long side's
    steps = {queries: labels.query_step, keys: labels.key_step}
    assert steps[few[0]] <= steps[many[0]]
    shape = GridShape(1, 2, queries, keys, label_chars=6, count=2)
    panels = grid_layout(shape, Style())
    few_cells = min(queries * panels.cell_height, keys * panels.cell_width)
    assert few_cells >= min(MIN_MAP_SIDE, few[0] * GRID_CELL) - 1e-9


@pytest.mark.parametrize("width", [0.01, 0.05, 0.2])
@pytest.mark.parametrize("height", [0.01, 0.05, 0.2])
def test_labels_take_one_size_and_each_side_is_thinned_for_its_own_cells(width, height):
    labels = labels_for(width, height)
    assert (labels.size,) == label_step(min(width, height) * 72)[:1]  # the narrower side's size
    narrower_step = labels.key_step if width <= height else labels.query_step
    assert narrower_step == label_step(min(width, height) * 72)[1]
    for step, side in ((labels.key_step, width), (labels.query_step, height)):
        assert labels.size <= step * side * 72 * 0.8 + 1e-6
        assert step == 1 or labels.size > (step - 1) * side * 72 * 0.8


def test_a_given_size_too_small_for_the_labels_says_the_smallest_that_fits():
    with pytest.raises(UsageError, match=r"--figsize 1,1 leaves no room .* give at least"):
        head_layout(5, 5, Style(figsize=(1.0, 1.0)))


@pytest.mark.parametrize("cell_points", [0.5, 3.0, 7.5, 11.0, 30.0])
@pytest.mark.parametrize("wanted", [None, 6.0, 12.0])
def test_labels_are_never_below_the_smallest_size_and_thinned_to_fit_their_cells(
    cell_points, wanted
):
    size, step = label_step(cell_points, wanted)
    assert size >= MIN_LABEL_POINTS
    assert size <= step * cell_points * 0.8 + 1e-6  # a shown label's room: step cells
    assert step == 1 or size > (step - 1) * cell_points * 0.8  # no sparser than needed


def grid(rows: int, columns: int, count: int | None = None, headers: bool = False) -> GridShape:
    count = rows * columns if count is None else count
    return GridShape(rows, columns, queries=9, keys=7, label_chars=6, count=count, headers=headers)


@pytest.mark.parametrize("shape", [grid(1, 1), grid(2, 4, headers=True), grid(2, 6, count=8)])
@pytest.mark.parametrize("style", [Style(), Style(dpi=73), Style(figsize=(7, 4.5), font_size=7)])
def test_panels_are_a_whole_number_of_pixels_apart_and_never_overlap(shape, style):
    layout = grid_layout(shape, style)
    across, down = layout.panel_pixels
    assert across == pytest.approx(layout.panel_width * style.dpi, abs=1e-6)
    assert down == pytest.approx(layout.panel_height * style.dpi, abs=1e-6)
    assert (layout.height * style.dpi) == pytest.approx(round(layout.height * style.dpi))
    boxes = [layout.cells(n) for n in range(shape.rows * shape.columns)]
    for x0, x1, y0, y1 in boxes:
        assert 0 < x0 < x1 <= layout.width and 0 < y0 < y1 <= layout.height
    for (ax0, ax1, ay0, ay1), (bx0, bx1, by0, by1) in itertools.combinations(boxes, 2):
        assert ax1 + layout.gap / 2 < bx0 or bx1 + layout.gap / 2 < ax0 or ay1 < by0 or by1 < ay0
    assert inside(layout.bar_box(style))
    bar_x = layout.bar_box(style)[0] * layout.width
    assert bar_x > max(x1 for _, x1, _, _ in boxes)  # right of every panel
    assert layout.label_overhang < layout.gap * style.dpi / 2  # pasted labels stay in the gap


def test_a_grid_too_large_for_a_given_size_is_refused():
    with pytest.raises(UsageError, match="too small for 12 × 12 maps"):
        grid_layout(grid(12, 12), Style(figsize=(2, 2)))


@pytest.mark.parametrize(("rows", "columns", "count"), [(1, 1, 1), (2, 6, 8), (3, 4, 12)])
def test_each_row_and_each_column_of_drawn_panels_is_labelled_once(rows, columns, count):
    shape = grid(rows, columns, count)
    labelled_rows = [n for n in range(rows * columns) if shape.labels_rows(n)]
    labelled_columns = [n for n in range(rows * columns) if shape.labels_columns(n)]
    assert [n // columns for n in labelled_rows] == list(range(math.ceil(count / columns)))
    assert sorted(n % columns for n in labelled_columns) == list(range(min(count, columns)))
    assert all(n < count for n in labelled_rows + labelled_columns)


def test_the_room_for_labels_grows_with_the_longest_label_and_the_font():
    short = grid_layout(grid(1, 2), Style())
    long = grid_layout(GridShape(1, 2, 9, 7, label_chars=14, count=2), Style())
    assert long.label_room > short.label_room
    larger = grid_layout(grid(1, 2), Style(font_size=12))
    assert larger.labels.size == 12 and larger.label_room > short.label_room
    assert short.labels.size <= 7.0


@pytest.mark.parametrize(
    ("figsize", "columns"),
    [((7.0, 3.0), 5), ((30.0, 2.0), 9), ((2.0, 30.0), 1), ((6.0, 6.0), 3)],
)
def test_a_given_figure_size_lays_one_layers_heads_out_for_the_largest_cells(figsize, columns):
    """9 heads of 5 × 5 at --figsize 7,3 took rows of six, three of them empty: now as many
    across as give the largest cells, each checked against every other count across."""
    from attnviz.render.layout import _fitting_columns

    found = _fitting_columns(9, 5, 5, figsize)
    assert found == columns

    def side(across):
        return min(figsize[0] / (across * 5), figsize[1] / (-(-9 // across) * 5))

    assert all(side(found) >= side(other) for other in range(1, 10))


def test_a_grid_draws_no_frame_where_no_map_is(runner, tmp_path):
    """The canvas holds a box per map drawn, not per place of its rows × columns."""
    from attnviz.cli import app

    common = ["export", "The quick brown fox jumps over the lazy dog", "--num-heads", "9"]
    common += ["--d-model", "72", "--view", "layer", "--layer", "0"]
    for figsize in ([], ["--figsize", "7,3"]):
        path = tmp_path / "layer.svg"
        result = runner.invoke(app, [*common, *figsize, "-o", str(path)])
        assert result.exit_code == 0, result.stderr
        svg = path.read_text(encoding="utf-8")
        # a patch per map's frame, the figure's, the board's and the colour bar's: an
        # empty place drew an empty frame too
        assert svg.count("<image") == 9 + 1 and svg.count('id="patch_') == 9 + 3
