"""Remake the manual's screenshots: the interactive page's views (page-*.png) and the
terminal picture of `attnviz show` (show-terminal.png). Needs chromium, chromedriver and
selenium, as the browser tests do: python docs/screenshots.py

Every other picture in docs/ is written by the command the docs print beside it
(``-o docs/NAME.png`` or ``--picture docs/NAME.png``); tests/test_docs.py checks that each
picture the docs show has its maker, here or there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver import ActionChains
from selenium.webdriver.chrome.service import Service

TEXT = "The animal didn't cross the street because it was too tired"
IOI = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
HERE = Path(__file__).parent
# What this script makes; tests/test_docs.py reads the list.
MADE_HERE = (
    "page-effects.png",
    "page-trace.png",
    "page-model.png",
    "page-layer.png",
    "page-head.png",
    "show-terminal.png",
)
TERMINAL_TEXT, TERMINAL_COLUMNS = "Hello I love you", 106


def attnviz(*arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "attnviz", *arguments], check=True)


def terminal_svg() -> str:
    """`attnviz show` as a true-colour terminal of TERMINAL_COLUMNS columns draws it, in a
    window drawn by rich (SVG)."""
    from rich.console import Console
    from rich.text import Text

    shown = subprocess.run(
        [sys.executable, "-m", "attnviz", "show", TERMINAL_TEXT, "-f", "terminal",
         "--color", "always", "--width", str(TERMINAL_COLUMNS)],
        check=True, capture_output=True, text=True,
        env={**os.environ, "COLORTERM": "truecolor"},
    ).stdout  # fmt: skip
    with open(os.devnull, "w") as nowhere:  # recorded, not shown
        console = Console(record=True, width=TERMINAL_COLUMNS, file=nowhere)
        console.print(Text.from_ansi(shown), end="")
    return console.export_svg(title="attnviz show")


def main() -> None:
    page = Path(tempfile.mkdtemp()) / "page.html"
    effects, trace = page.with_name("effects.html"), page.with_name("trace.html")
    attnviz("export", "--model", "minilm", TEXT, "-o", str(page))
    answer = ["--model", "smollm2", "--answer", " Mary", "--versus", " John"]
    attnviz("export", IOI, *answer, "--corrupt", IOI_CORRUPT, "-o", str(effects))
    fact = [
        "--answer",
        " Paris",
        "--versus",
        " Rome",
        "--corrupt",
        "The Colosseum is in the city of",
    ]
    attnviz(
        "trace", "--model", "smollm2", "The Eiffel Tower is in the city of", *fact, "-o", str(trace)
    )
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1300,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.set_window_size(1300, 1500)  # half of SmolLM2's 30 layers
        driver.get(effects.as_uri())
        driver.execute_script(
            "const s = document.getElementById('effect'); s.value = 'patch';"
            "s.dispatchEvent(new Event('change'));"
            "document.getElementById('sort-effect').click();"
            "window.scrollTo(0, document.body.scrollHeight);"  # the layers that matter here
        )
        driver.save_screenshot(HERE / "page-effects.png")
        driver.set_window_size(1300, 900)
        driver.get(trace.as_uri())
        canvas = driver.find_element("id", "trace")
        ActionChains(driver).move_to_element_with_offset(canvas, -60, -40).perform()
        driver.save_screenshot(HERE / "page-trace.png")
        driver.get(page.as_uri())
        driver.save_screenshot(HERE / "page-model.png")
        driver.find_element("id", "tab-layer").click()
        driver.execute_script(
            "document.querySelector('#layer').value = 2;"
            "document.querySelector('#layer').dispatchEvent(new Event('change'))"
        )
        token = driver.find_elements("css selector", "#queries .token")[8]  # "street"
        ActionChains(driver).move_to_element(token).perform()
        driver.save_screenshot(HERE / "page-layer.png")
        driver.find_element("id", "tab-head").click()
        canvas = driver.find_element("id", "map")
        ActionChains(driver).move_to_element_with_offset(canvas, -40, 60).perform()
        driver.save_screenshot(HERE / "page-head.png")
        page.with_name("terminal.svg").write_text(terminal_svg(), encoding="utf-8")
        framed = page.with_name("terminal.html")  # the SVG drawn 1360 pixels wide, no margin
        framed.write_text('<body style="margin:0"><img src="terminal.svg" '
                          'style="display:block;width:1360px"></body>')  # fmt: skip
        driver.set_window_size(1400, 800)
        driver.get(framed.as_uri())
        driver.find_element("css selector", "img").screenshot(str(HERE / "show-terminal.png"))
    finally:
        driver.quit()
        shutil.rmtree(page.parent)


if __name__ == "__main__":
    main()
