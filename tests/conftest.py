from __future__ import annotations

import os
import shutil
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


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium driven by Selenium through the system's chromedriver, every
    network request blocked. Without a browser its tests skip with one loud line; with
    ATTNVIZ_REQUIRE_BROWSER=1 (as .ci/run sets it) they fail instead."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
    except ImportError:
        webdriver = None
    if not (chromium and driver_path and webdriver):
        message = (
            "BROWSER TESTS SKIPPED: no chromium/chromedriver/selenium here "
            "(apt-get install chromium chromium-driver; pip install selenium)"
        )
        if os.environ.get("ATTNVIZ_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        print(f"\n{'!' * 20} {message} {'!' * 20}")
        pytest.skip(message)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1200,900",
        "--force-device-scale-factor=1",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: nothing can leave
        "--force-color-profile=srgb",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*", "ws*"]})
    yield driver
    driver.quit()


@pytest.fixture(autouse=True)
def offline_hub(tmp_path_factory, monkeypatch):
    """No test reads the user's Hugging Face cache or reaches the Hub."""
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.getbasetemp() / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Tiny random models of each family of tiny_models.BUILDERS (BERT, GPT-2, Llama, BART,
    T5, Mistral, Gemma 2, Gemma 3), saved once per session."""
    from tests import tiny_models

    root = tmp_path_factory.mktemp("models")
    return {name: str(build(root / name)) for name, build in tiny_models.BUILDERS.items()}


@pytest.fixture(scope="session")
def generators(tmp_path_factory):
    """Tiny random language models of each family of tiny_models.GENERATORS (GPT-2, Llama
    with grouped-query attention, BART, Gemma 2, Gemma 3)."""
    from tests import tiny_models

    root = tmp_path_factory.mktemp("generators")
    return {name: str(build(root / name)) for name, build in tiny_models.GENERATORS.items()}


@pytest.fixture(scope="session")
def language_models(generators):
    """The tiny causal language models that patching, tracing and the effects are held to
    references on, each loaded once (eval, as attnviz loads it)."""
    import attnviz
    from tests.hook_references import FAMILIES

    # Gemma 3 besides: its sliding-window layers run the fused kernel (not Gemma 2's
    # soft-capped eager attention), which the gradient passes compute by windows.
    return {family: attnviz.load(generators[family]) for family in (*FAMILIES, "gemma3-lm")}


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
