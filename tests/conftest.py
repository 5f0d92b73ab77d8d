from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

SNAPSHOTS = Path(__file__).parent / "snapshots"


def pytest_collection_modifyitems(items):
    """Every test that drives the browser is marked so, whoever writes the next one."""
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)


def pytest_runtest_setup(item):
    """A group's tests must share a worker (Ray's cluster, a real model's loads): fail
    loudly where pytest-xdist stopped grouping them. A real packaged model's tests (marked
    with its alias: smollm2, gemma3) skip, saying why, where its package is absent; never
    in CI, where make installs it."""
    group = item.get_closest_marker("xdist_group")
    if group is not None and getattr(item.config.option, "loadgroup", False):
        assert item.nodeid.endswith(f"@{group.args[0]}"), "--dist loadgroup does not group"
    import importlib.util

    from attnviz.pretrained.loading import ALIASES

    for name in ("smollm2", "gemma3"):
        if item.get_closest_marker(name) is None:
            continue
        alias = ALIASES[name]
        missing = [
            package
            for package, absent in (
                (alias.packaged.distribution, alias.packaged.located() is None),
                ("gguf", importlib.util.find_spec("gguf") is None),
            )
            if absent
        ]
        if missing:
            why = f"{' and '.join(missing)} not installed: {alias.install}"
            if os.environ.get("CI"):
                pytest.fail(f"CI runs {name}'s tests: {why}")
            pytest.skip(why)


@pytest.fixture(autouse=True)
def offline_hub(tmp_path_factory, monkeypatch):
    """No test reads the user's Hugging Face cache or reaches the Hub."""
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.getbasetemp() / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Tiny random models of five families, saved once per session."""
    from tests import tiny_models

    root = tmp_path_factory.mktemp("models")
    return {name: str(build(root / name)) for name, build in tiny_models.BUILDERS.items()}


@pytest.fixture(scope="session")
def generators(tmp_path_factory):
    """Tiny random language models (GPT-2, Llama with grouped-query attention, BART)."""
    from tests import tiny_models

    root = tmp_path_factory.mktemp("generators")
    return {name: str(build(root / name)) for name, build in tiny_models.GENERATORS.items()}


@pytest.fixture
def blocks(monkeypatch):
    """Counts the blocks of weights computed from a model's fused attention, so that a test
    knows that path ran: how many query rows each block held."""
    from attnviz.pretrained import fused

    seen: list[int] = []
    block = fused.Scores.block

    def counted(self, item, head, rows, keys):
        seen.append(len(rows))
        return block(self, item, head, rows, keys)

    monkeypatch.setattr(fused.Scores, "block", counted)
    return seen


@pytest.fixture
def runner() -> CliRunner:
    # No terminal, no inherited colour settings: the output depends on the flags alone.
    return CliRunner(
        env={"NO_COLOR": None, "FORCE_COLOR": None, "COLUMNS": "120", "COLORTERM": "truecolor"}
    )


@pytest.fixture
def snapshot():
    """Compare text with tests/snapshots/NAME; ATTNVIZ_UPDATE_SNAPSHOTS=1 rewrites them."""

    def check(name: str, text: str) -> None:
        path = SNAPSHOTS / name
        if os.environ.get("ATTNVIZ_UPDATE_SNAPSHOTS") == "1":
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
        assert path.exists(), f"missing snapshot {path}: run with ATTNVIZ_UPDATE_SNAPSHOTS=1"
        assert text == path.read_text(encoding="utf-8")

    return check
