"""`attnviz render`: saved maps drawn in the terminal, as show draws them, or as a picture,
without loading a model. (Reading saved files safely: tests/test_formats.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import attnviz
from attnviz.cli import app


def test_render_draws_saved_maps(runner, tmp_path):
    path = tmp_path / "maps.npz"
    runner.invoke(app, ["show", "Hello I love you", "-f", "npz", "-o", str(path)])
    result = runner.invoke(app, ["render", str(path), "--width", "120", "-a", "rollout"])
    assert result.exit_code == 0, result.stderr
    assert "rollout · layers 0,1 · heads 0–3" in result.stdout
    assert runner.invoke(app, ["render", str(tmp_path / "nope.json")]).exit_code == 2


@pytest.mark.parametrize("view", ["panels", "grid"])
def test_render_draws_saved_maps_in_the_terminal_view_show_draws(runner, tmp_path, view):
    path = tmp_path / "maps.json"
    runner.invoke(app, ["show", "Hello I love you", "-f", "json", "-o", str(path)])
    terminal = ["--view", view, "--color", "never", "--width", "100"]
    shown = runner.invoke(app, ["show", "Hello I love you", *terminal])
    rendered = runner.invoke(app, ["render", str(path), *terminal])
    assert rendered.exit_code == 0, rendered.stderr
    assert rendered.stdout == shown.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--view", "head"], "--view head applies to png, svg and pdf pictures and the"),
        (["--view", "grid", "-o", "x.png"], "--view grid applies to the terminal picture, not a"),
        (["-o", "x.txt"], "name it .png, .svg, .pdf or .html"),
    ],
)
def test_render_refuses_what_it_cannot_draw(runner, tmp_path, monkeypatch, arguments, message):
    path = tmp_path / "maps.json"
    path.write_text(json.dumps(attnviz.extract("a b").to_dict()))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["render", str(path), *arguments])
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "x.png").exists()


def test_render_loads_no_model_library(tmp_path):
    path = tmp_path / "maps.json"
    path.write_text(json.dumps(attnviz.extract("a b").to_dict()))
    probe = (
        "import sys\nfrom typer.testing import CliRunner\nfrom attnviz.cli import app\n"
        f"result = CliRunner().invoke(app, ['render', {str(path)!r}, '-a', 'rollout'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(','.join(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_render_saves_a_picture_of_saved_maps(runner, tmp_path):
    saved, picture = tmp_path / "maps.json", tmp_path / "maps.pdf"
    written = runner.invoke(app, ["show", "Hello I love you", "-f", "json", "-o", str(saved)])
    assert written.exit_code == 0
    result = runner.invoke(app, ["render", str(saved), "-o", str(picture), "-a", "mean"])
    assert result.exit_code == 0, result.stderr
    assert picture.read_bytes().startswith(b"%PDF")


def test_render_picks_layers_and_heads_of_saved_maps(runner, tmp_path):
    path = tmp_path / "maps.json"
    path.write_text(
        json.dumps(attnviz.extract("Hello I love you", layers="1", heads="0-2").to_dict())
    )
    picture = tmp_path / "one.png"
    result = runner.invoke(
        app, ["render", str(path), "--view", "head", "-l", "1", "--head", "2", "-o", str(picture)]
    )
    assert result.exit_code == 0, result.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")
    drawn = runner.invoke(app, ["render", str(path), "--head", "-1", "--color", "never"])
    assert "layer 1 · head 2" in drawn.stdout and "head 0" not in drawn.stdout
    missing = runner.invoke(app, ["render", str(path), "-l", "0"])
    assert missing.exit_code == 2
    assert "layer 0 is not in these saved maps: they hold layers 1" in missing.stderr
