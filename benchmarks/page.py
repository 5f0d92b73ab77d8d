"""The interactive page against bertviz: file size and time to an interactive page.

Target (issue 14): MiniLM's model view (6 × 12 heads) of a 300-token text in at
most 15 MB, interactive in under 2 s in headless Chromium, offline. bertviz's
model_view of the same attention is written the same way (html_action="return")
and opened in the same browser with the network blocked; bertviz is not a
dependency of attnviz: install it to compare (pip install bertviz).

    python benchmarks/page.py [--tokens 300]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

WORDS = (
    "the quick brown fox jumps over the lazy dog while a small bird sings in the old "
    "oak tree near the river bank and children laugh in the warm afternoon sun"
).split()


def text_of(tokens: int) -> str:
    """Words enough for about ``tokens`` MiniLM tokens ([CLS] and [SEP] included)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(tokens - 2))


def open_in_chromium(path: Path, ready: str) -> tuple[float, int]:
    """Seconds until ``ready`` (a JavaScript expression) holds, and the console errors."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--host-resolver-rules=MAP * ~NOTFOUND"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        start = time.perf_counter()
        driver.get(path.as_uri())
        while not driver.execute_script(f"return Boolean({ready})"):
            if time.perf_counter() - start > 30:
                return float("inf"), -1
            time.sleep(0.02)
        elapsed = time.perf_counter() - start
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        return elapsed, len(severe)
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=300)
    tokens = parser.parse_args().tokens
    import attnviz

    extractor = attnviz.load("minilm")
    maps = extractor.extract(text_of(tokens))
    print(f"MiniLM, {len(maps.query_tokens)} tokens, {len(maps.layers)} × {len(maps.heads)} heads")
    folder = Path(tempfile.mkdtemp())
    ours = folder / "attnviz.html"
    start = time.perf_counter()
    ours.write_text(maps.to_html())
    written = time.perf_counter() - start
    seconds, console_errors = open_in_chromium(ours, "document.body.dataset.ready")
    size = ours.stat().st_size / 2**20
    print(
        f"attnviz page   {size:7.1f} MB  written in {written:.2f} s  interactive in "
        f"{seconds:.2f} s  console errors {console_errors}"
    )
    ok = size <= 15 and seconds < 2
    try:
        import torch
        from bertviz import model_view
    except ImportError:
        print("bertviz          not installed (pip install bertviz to compare)")
    else:
        loaded = extractor.loaded
        encoded = loaded.tokenizer(text_of(tokens), return_tensors="pt")
        with torch.inference_mode():
            attention = loaded.model(**encoded, output_attentions=True).attentions
        labels = loaded.tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
        theirs = folder / "bertviz.html"
        start = time.perf_counter()
        theirs.write_text(model_view(attention, labels, html_action="return").data)
        written = time.perf_counter() - start
        size = theirs.stat().st_size / 2**20
        seconds, console_errors = open_in_chromium(theirs, "document.querySelector('svg') !== null")
        shown = (
            "never (its scripts come from the internet)"
            if seconds == float("inf")
            else (f"{seconds:.2f} s")
        )
        print(
            f"bertviz page   {size:7.1f} MB  written in {written:.2f} s  interactive: {shown}"
            f"  console errors {console_errors}"
        )
    shutil.rmtree(folder)
    print("target: attnviz <= 15 MB and interactive < 2 s:", "met" if ok else "NOT met")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
