"""The development guide's worked examples (docs/examples/*.patch) cannot go stale: each
patch applies to a copy of today's tree. A whole change (its code, --help, docs and tests)
touches at most two files under attnviz/ and four outside tests/, and the quick suite
passes on the tree with it applied (its own tests among them). The three older examples
are code alone (at most three files under attnviz/), what each adds run in a real process
of the patched copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
TEXT = "The man walked the dog because"

pytestmark = [pytest.mark.slow, pytest.mark.system]  # real processes of a patched copy


def _patched(example: str, tmp_path: Path) -> Path:
    """A copy of attnviz/ with the example's patch applied (checked: at most three files)."""
    tree = tmp_path / "tree"
    shutil.copytree(
        ROOT / "attnviz", tree / "attnviz", ignore=shutil.ignore_patterns("__pycache__")
    )
    patch = EXAMPLES / f"{example}.patch"
    touched = {
        line.split()[-1].removeprefix("b/")
        for line in patch.read_text().splitlines()
        if line.startswith("+++ ")
    }
    assert touched and all(path.startswith("attnviz/") for path in touched)
    assert len(touched) <= 3, touched
    subprocess.run(["git", "apply", "-p1", str(patch)], cwd=tree, check=True)
    return tree


def _attnviz(tree: Path, *arguments: str, cwd: Path | None = None) -> str:
    """What the patched attnviz prints, run as a real process."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run(
        [sys.executable, "-m", "attnviz", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd or tree,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _weights(tree: Path, *arguments: str) -> np.ndarray:
    return np.array(json.loads(_attnviz(tree, "show", *arguments, "-f", "json"))["weights"])


WHOLE = ("head-effect-resample-ablation", "trace-site-mlp-in", "metric-prob")


def test_every_example_is_tested():
    assert {path.stem for path in EXAMPLES.glob("*.patch")} == {
        "data-format-tsv",
        "recorded-option-label",
        "head-statistic-max",
        *WHOLE,
    }


def _touched(patch: Path) -> set[str]:
    return {
        line.split()[-1].removeprefix("b/")
        for line in patch.read_text().splitlines()
        if line.startswith("+++ ") and line.split()[-1] != "/dev/null"
    } | {
        line.split()[-1].removeprefix("a/")
        for line in patch.read_text().splitlines()
        if line.startswith("--- ") and line.split()[-1] != "/dev/null"
    }


@pytest.mark.parametrize("example", WHOLE)
def test_a_whole_change_is_small_and_the_quick_suite_passes_with_it(example, tmp_path):
    patch = EXAMPLES / f"{example}.patch"
    touched = _touched(patch)
    code = [path for path in touched if path.startswith("attnviz/")]
    outside_tests = [path for path in touched if not path.startswith("tests/")]
    assert 1 <= len(code) <= 2 and len(outside_tests) <= 4, sorted(touched)
    tree = tmp_path / "tree"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    for name in listed:
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    subprocess.run(["git", "apply", "-p1", str(patch)], cwd=tree, check=True)
    environment = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-n", "auto", "-p", "no:cacheprovider",
         "-m", "not slow and not ray and not browser"],
        cwd=tree, env=environment, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]


def test_a_data_format_is_written_by_show_save_and_batch(tmp_path):
    tree = _patched("data-format-tsv", tmp_path)
    lines = _attnviz(tree, "show", "a b c", "-f", "tsv").splitlines()
    assert lines[0].split("\t") == ["layer", "head", "query", "key", "weight"]
    weights = _weights(tree, "a b c")  # (L, H, T, S)
    for line in lines[1:]:
        layer, head, query, key, weight = line.split("\t")
        expected = weights[int(layer), int(head), int(query), int(key)]
        assert float(weight) == pytest.approx(expected, abs=1e-6)
    assert len(lines) == 1 + weights.size
    source = tmp_path / "in.txt"
    source.write_text("a b\nthe cat sat\n")
    _attnviz(tree, "batch", str(source), "-o", str(tmp_path / "out"), "-f", "tsv")
    assert len(list((tmp_path / "out").glob("*.tsv"))) == 2
    assert "tsv" in _attnviz(tree, "batch", "--help")


def test_a_recorded_option_is_kept_in_saved_maps(tmp_path):
    tree = _patched("recorded-option-label", tmp_path)
    for suffix in ("json", "npz"):
        saved = tmp_path / f"maps.{suffix}"
        _attnviz(tree, "show", "a b", "--label", "run 7", "-o", str(saved))
        read = _attnviz(
            tree,
            "heads",
            "--from",
            str(saved),
            "-f",
            "json",
        )
        assert json.loads(read)["heads"]  # the saved maps still read
        environment = {**os.environ, "PYTHONPATH": str(tree)}
        label = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import attnviz; print(attnviz.AttentionMaps.read({str(saved)!r}).recorded.label)",
            ],
            capture_output=True,
            text=True,
            env=environment,
            cwd=tree,  # the patched copy, not this checkout, is imported
            check=True,
        ).stdout.strip()
        assert label == "run 7"


def test_a_head_statistic_reaches_heads_sort_and_stats(tmp_path):
    tree = _patched("head-statistic-max", tmp_path)
    weights = _weights(tree, "the cat sat on the mat")  # (L, H, T, S)
    expected = weights.max(-1).mean(-1)  # each row's largest weight, averaged over rows
    rows = json.loads(
        _attnviz(tree, "heads", "the cat sat on the mat", "--sort", "max", "-f", "json")
    )
    found = [row["max"] for row in rows["heads"]]
    assert found == sorted(found, reverse=True)
    for row in rows["heads"]:
        assert row["max"] == pytest.approx(expected[row["layer"], row["head"]], abs=1e-6)
    source = tmp_path / "corpus.txt"
    source.write_text("the cat sat\non the mat\n")
    corpus = json.loads(_attnviz(tree, "stats", str(source), "-f", "json", "-q"))
    assert "max" in json.dumps(corpus)
