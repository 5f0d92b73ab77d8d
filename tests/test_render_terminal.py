"""Terminal pictures: snapshots at a fixed width, fitting, pooling and colour rules."""

from __future__ import annotations

import numpy as np
import pytest
from rich.cells import cell_len

import attnviz
from attnviz.analysis.grid import pool_map
from attnviz.cli import app
from attnviz.maps import AttentionMaps
from attnviz.render.terminal import choose_layout, shade


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
