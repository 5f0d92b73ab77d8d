"""The development guide's worked examples (docs/examples/*.patch) cannot go stale: each
is a whole change (its code, --help, docs and tests) that applies to a copy of today's
tree, touches at most two files under attnviz/ and four outside tests/, and with which
the quick suite passes (its own tests among it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"

pytestmark = [pytest.mark.slow, pytest.mark.system]  # the quick suite of a patched copy

EXAMPLES_NAMED = (
    "data-format-tsv",
    "recorded-option-label",
    "head-statistic-max",
    "head-effect-patch-ablation",
    "trace-site-mlp-in",
    "metric-logit",
    "circuit-select-harmful",
    "circuit-resample-ablation",
    "circuit-format-dot",
)


def test_every_example_is_tested():
    assert {path.stem for path in EXAMPLES.glob("*.patch")} == set(EXAMPLES_NAMED)


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


@pytest.mark.parametrize("example", EXAMPLES_NAMED)
def test_a_whole_change_is_small_and_the_quick_suite_passes_with_it(example, tmp_path):
    patch = EXAMPLES / f"{example}.patch"
    touched = _touched(patch)
    code = [path for path in touched if path.startswith("attnviz/")]
    outside_tests = [path for path in touched if not path.startswith("tests/")]
    assert "docs/cli.md" not in touched  # written from the help in the patched tree
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
    # the command-line reference is written from the help, as after any change of it
    subprocess.run([sys.executable, "docs/cli_reference.py"], cwd=tree, env=environment, check=True)
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-n", "auto", "-p", "no:cacheprovider",
         "-m", "not slow and not ray and not browser"],
        cwd=tree, env=environment, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
