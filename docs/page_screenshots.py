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
HERE = Path(__file__).parent


def main() -> None:
    page = Path(tempfile.mkdtemp()) / "page.html"
    command = ["attnviz", "export", "--model", "minilm", TEXT, "-o", str(page)]
    subprocess.run([sys.executable, "-m", *command], check=True)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1300,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
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
