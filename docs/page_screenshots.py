"""Remake the manual's screenshots of the interactive page (needs chromium, chromedriver
and selenium, as the browser tests do): python docs/page_screenshots.py"""

from __future__ import annotations

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


def attnviz(*arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "attnviz", *arguments], check=True)


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
    finally:
        driver.quit()
        shutil.rmtree(page.parent)


if __name__ == "__main__":
    main()
