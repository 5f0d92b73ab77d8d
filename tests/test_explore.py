"""explore: Textual's headless pilot presses the keys a person would."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console

import attnviz
from attnviz.cli import app
from attnviz.explore import AGGREGATES, SIDE_WIDTH, ExploreApp

TEXT = "The man walked the dog"


def explorer(tmp_path, model: str = "builtin") -> ExploreApp:
    maps = attnviz.extract(TEXT, model=model)
    return ExploreApp(maps, lambda text: attnviz.extract(text, model=model), tmp_path)


def drive(app: ExploreApp, *keys: str, size=(120, 36)):
    async def session():
        async with app.run_test(size=size) as pilot:
            for key in keys:
                await pilot.press(key)
            await app.workers.wait_for_complete()
            await pilot.pause()
            return app.export_screenshot()

    return asyncio.run(session())


@pytest.mark.slow
def test_arrows_move_between_heads_and_layers(tmp_path):
    app = explorer(tmp_path)

    async def session():
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("right", "right", "down", "left")
            assert (app.shown.layer, app.shown.head) == (1, 1)
            assert app.sub_title.endswith("layer 1 · head 1")
            await pilot.press("up", "up", "left", "left")  # both wrap around
            assert (app.shown.layer, app.shown.head) == (1, 3)

    asyncio.run(session())


def test_the_cursor_moves_over_query_tokens(tmp_path):
    app = explorer(tmp_path)

    async def session():
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("tab", "tab", "tab", "shift+tab")
            assert app.shown.cursor == 2
            top = app.query_one("#top").content
            assert "where 'walked' looks" in str(top.renderables[0])

    asyncio.run(session())


def test_grid_values_and_aggregates(tmp_path):
    app = explorer(tmp_path)

    async def session():
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("g", "v")
            assert app.shown.grid and app.shown.values
            assert app.sub_title.endswith("head 0 marked")
            for expected in AGGREGATES[1:]:
                await pilot.press("m")
                assert app.shown.aggregate_method == expected
            await pilot.press("m")
            assert app.shown.aggregate_method is None

    asyncio.run(session())


def test_g_shows_the_grid_show_draws_with_the_current_head_marked(tmp_path):
    from textual.widgets import Static

    from attnviz.render.terminal_grid import render_grid

    app = explorer(tmp_path)

    def text(renderable) -> str:
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(renderable)
        return console.export_text()

    async def session():
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("down", "right", "g")
            shown = app.query_one("#heatmap", Static).content
            width = 120 - SIDE_WIDTH - 3
            expected = render_grid(
                app.shown.maps, width=width, height=34, use_colour=True, highlight=(1, 1)
            )
            assert text(shown) == text(expected)
            assert "L0" in text(shown) and f"H{len(app.shown.maps.heads) - 1}" in text(shown)

    asyncio.run(session())


@pytest.mark.slow
def test_export_writes_the_current_view(tmp_path):
    app = explorer(tmp_path)
    drive(app, "right", "e", "g", "e", "g", "m", "e", "m", "e", "m", "e")
    assert [path.name for path in app.exported] == [
        "attnviz-L0-H1.png", "attnviz-grid.png", "attnviz-L0-mean.png", "attnviz-L0-max.png",
        "attnviz-rollout.png",
    ]  # fmt: skip
    for path in app.exported:  # every view its own file: none overwrote another
        assert path.read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_a_new_sentence_is_computed_in_the_background(tmp_path):
    app = explorer(tmp_path)
    drive(app, "slash", *"I love you", "enter")
    assert app.shown.maps.query_tokens == ["i", "love", "you"]
    assert app.shown.cursor == 0


def test_a_small_terminal_gets_a_message(tmp_path):
    app = explorer(tmp_path)
    drive(app, size=(40, 10))
    assert app.has_class("cramped")


def test_a_terminal_resized_small_gets_the_message_at_once_and_back_the_map(tmp_path):
    app = explorer(tmp_path)
    seen = []

    async def session():
        async with app.run_test(size=(120, 40)) as pilot:
            for size in ((50, 12), (120, 40), (60, 30)):
                await pilot.resize_terminal(*size)
                await pilot.pause()
                seen.append(app.has_class("cramped"))

    asyncio.run(session())
    assert seen == [True, False, False]


@pytest.mark.system
@pytest.mark.slow
@pytest.mark.minilm
def test_all_72_heads_of_minilm_are_reachable(tmp_path):
    app = explorer(tmp_path, model="minilm")
    seen = set()

    async def session():
        async with app.run_test(size=(140, 40)) as pilot:
            for _ in range(6):
                for _ in range(12):
                    seen.add((app.shown.layer, app.shown.head))
                    await pilot.press("right")
                await pilot.press("down")

    asyncio.run(session())
    assert len(seen) == 72


def test_screen_snapshot(tmp_path, snapshot):
    """What the screen holds at 100 x 30: title, heatmap and both panels, with colours.

    The widgets' content is rendered with rich rather than compared as Textual's
    SVG screenshot, whose markup changes with Textual's version.
    """
    app = explorer(tmp_path)

    async def session():
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("right", "tab")
            console = Console(
                width=100,
                record=True,
                file=io.StringIO(),
                color_system="truecolor",
                highlight=False,
            )
            console.print(app.sub_title)
            for name in ("#heatmap", "#top", "#stats"):
                console.print(app.query_one(name).content)
            return console.export_text(styles=True)  # the cell colours are the picture

    snapshot("explore_100x30.txt", asyncio.run(session()))


def test_explore_checks_its_export_folder_and_its_terminal_at_start(runner, tmp_path):
    from attnviz.cli.environment import Environment

    terminal = Environment(True, True)
    missing = runner.invoke(
        app, ["explore", "a b", "--export-dir", str(tmp_path / "no")], obj=terminal
    )
    assert missing.exit_code == 2 and "is not a folder" in missing.stderr
    logged = runner.invoke(app, ["explore", "a b"], obj=Environment(True, False))
    assert logged.exit_code == 2 and "stdout and stderr on a terminal" in logged.stderr
