"""Terminal pictures: snapshots at a fixed width, fitting, pooling and colour rules."""

from __future__ import annotations

import numpy as np
import pytest
from rich.cells import cell_len

import attnviz
from attnviz.analysis.grid import pool_map
from attnviz.cli import app
from attnviz.cli.environment import Environment
from attnviz.maps import AttentionMaps
from attnviz.render.terminal import choose_layout, shade
from attnviz.render.terminal_grid import choose_thumbnails, render_grid

TERMINAL = Environment(stdout_is_terminal=True, stderr_is_terminal=False)


SENTENCE = "The cat sat on the mat because the mat was warm"


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("show_hello_120.txt", ["show", "Hello I love you", "--color", "never"]),
        ("show_hello_values_120.txt", ["show", "Hello I love you", "--values", "--color", "never"]),
        ("show_masked_120.txt", ["show", "Hello I love you", "-m", "masked", "--layer", "0"]),
        (
            "show_cross_120.txt",
            ["show", "Hello I love you", "-m", "cross", "-t", "Bonjour je t'aime", "--head", "0"],
        ),
        ("show_hello_truecolor_120.txt", ["show", "Hello I love you", "--color", "always"]),
    ],
)
def test_snapshots_at_120_columns(runner, snapshot, name, arguments):
    result = runner.invoke(app, [*arguments, "-f", "terminal", "--width", "120"])
    assert result.exit_code == 0, result.stderr
    snapshot(name, result.stdout)


def test_hello_fits_eight_heads_three_to_a_row_in_120_columns(runner):
    result = runner.invoke(app, ["show", "Hello I love you", "-f", "terminal", "--width", "120"])
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    title_rows = [line for line in lines if "╭" in line]
    assert [row.count("head") for row in title_rows] == [3, 3, 2]
    assert max(cell_len(line) for line in lines) <= 120


@pytest.mark.parametrize("tokens", [30, 200, 1000])
@pytest.mark.parametrize("width", [40, 80, 120])
def test_any_length_fits_the_width(tokens, width):
    text = " ".join(f"w{i}" for i in range(tokens))
    result = subprocess_free_render(text, width)
    assert max(cell_len(line) for line in result.splitlines()) <= width
    if tokens * 3 + 10 > width:
        assert "pooled to fit" in result


def subprocess_free_render(text, width):
    from typer.testing import CliRunner

    result = CliRunner().invoke(
        app, ["show", text, "--layer", "0", "--head", "0", "-f", "terminal", "--width", str(width)]
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_pooling_keeps_rows_summing_to_one():
    rng = np.random.default_rng(0)
    matrix = rng.random((10, 10))
    matrix /= matrix.sum(1, keepdims=True)
    pooled = pool_map(matrix, 3)
    assert pooled.shape == (4, 4)
    np.testing.assert_allclose(pooled.sum(1), 1.0)
    np.testing.assert_allclose(pooled[0, 0], matrix[:3, :3].sum(1).mean())
    np.testing.assert_allclose(pooled[3, 3], matrix[9, 9])


def test_wide_characters_get_cells_wide_enough():
    maps = attnviz.extract("我爱你 👍🏽", layers=0, heads=0)
    layout = choose_layout(maps.query_tokens, maps.key_tokens, 80, values=False)
    assert layout.cell >= 2


def test_shades_only_leave_exact_zeros_blank():
    assert shade(0.0) == " "
    assert shade(1e-6) == "·"
    assert shade(1.0) == "█"
    assert len({shade(value) for value in np.linspace(0.01, 1, 100)}) == 5


def test_renderer_takes_plain_arrays():
    maps = AttentionMaps(
        query_tokens=["a", "b"],
        key_tokens=["x", "y", "z"],
        weights=np.full((1, 1, 2, 3), 1 / 3),
        layers=[0],
        heads=[0],
        mode="cross",
        model="hand-made",
    )
    from rich.console import Console

    console = Console(width=60, record=True, color_system=None)
    from attnviz.render.terminal import render

    console.print(render(maps, width=60, use_colour=False))
    text = console.export_text()
    assert "hand-made · cross attention" in text and "layer 0 · head 0" in text


@pytest.mark.parametrize(
    ("environment", "coloured"),
    [({"FORCE_COLOR": "1"}, True), ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False), ({}, False)],
)
def test_colour_follows_the_terminal_and_no_color(runner, environment, coloured):
    """Colour for a terminal (forced here), never under NO_COLOR or in a pipe."""
    unset = {"FORCE_COLOR": None, "NO_COLOR": None, "TERM": "xterm-256color"}
    result = runner.invoke(
        app, ["show", "hi there", "-l", "0", "-f", "terminal"], env={**unset, **environment}
    )
    assert result.exit_code == 0, result.stderr
    assert ("\x1b[48;" in result.stdout) == coloured  # cell backgrounds
    if not coloured:
        assert set(result.stdout) & set("·░▒▓█")


def test_long_inputs_in_the_terminal_are_not_solid(runner):
    text = " ".join(f"w{i}" for i in range(300))
    result = runner.invoke(
        app,
        [
            "show",
            text,
            "-l",
            "0",
            "--head",
            "0",
            "-f",
            "terminal",
            "--width",
            "80",
            "--color",
            "never",
        ],
    )
    assert result.exit_code == 0 and "pooled to fit" in result.stdout
    cells = [
        c
        for line in result.stdout.splitlines()
        if line.startswith("│")
        for c in line
        if c in "·░▒▓█"
    ]
    assert cells and cells.count("█") < len(cells) / 4


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


@pytest.mark.parametrize(
    ("rows", "said"), [("last", "rows: query token 3"), ("1-2", "rows: query tokens 1,2")]
)
def test_the_title_names_the_rows_kept_once_and_counts_in_the_right_number(runner, rows, said):
    arguments = ["show", "Hello I love you", "--rows", rows, "--span", "0", "-l", "0"]
    result = runner.invoke(app, [*arguments, "-f", "terminal", "--width", "200"])
    assert result.exit_code == 0, result.stderr
    title = result.stdout.splitlines()[0]
    assert title.endswith(f" · columns: 4 key tokens · {said} · span: key token 0"), title
    assert title.count("rows") == 1


@pytest.mark.parametrize("size", [{"COLUMNS": "0"}, {"COLUMNS": "-3"}, {"LINES": "0"}])
@pytest.mark.parametrize(
    "command",
    [
        ["show", "a b c", "-f", "terminal"],
        ["heads", "a b c"],
        ["explain", "a b c"],
        ["diff", "a b c", "--against", "builtin:seed=1"],
        ["render", "SAVED"],
    ],
)
def test_a_size_of_zero_in_the_environment_is_ignored(runner, tmp_path, size, command):
    """COLUMNS=0 drew into no columns: nothing printed, exit 0. Such a value is unset."""
    saved = tmp_path / "maps.json"
    saved.write_text(runner.invoke(app, ["show", "a b c", "-f", "json"]).stdout)
    command = [str(saved) if part == "SAVED" else part for part in command]
    result = runner.invoke(app, command, env=size)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.strip()) > 20
