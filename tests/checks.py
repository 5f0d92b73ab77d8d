"""Checks several test modules make the same way: a usage error's one line, a batch
folder's records, a page opened in the browser."""

from __future__ import annotations

import json
from pathlib import Path


def failed_in_process(result, code: int, message: str) -> None:
    """A CliRunner result: the code, one error line on stderr, nothing on stdout."""
    assert result.exit_code == code, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz: error: "), result.stderr
    assert message in lines[0]


def manifest(folder: Path, name: str = "manifest.jsonl") -> list[dict]:
    """The records (an interrupted run's manifest begins with its claim, no record)."""
    lines = (json.loads(line) for line in (folder / name).read_text().splitlines())
    return [line for line in lines if "index" in line]


def unrecorded(folder: Path) -> set[str]:
    """The files in a batch's folder that none of its manifests records: none, always."""
    records = [
        record for path in folder.glob("manifest*.jsonl") for record in manifest(folder, path.name)
    ]
    recorded = {name for record in records for name in record["files"]}
    manifests = {path.name for path in folder.glob("manifest*.jsonl")}
    return {path.name for path in folder.iterdir()} - recorded - manifests


def open_page(browser, path):
    browser.get(path.as_uri())
    assert browser.execute_script("return document.body.dataset.ready") == "true"
    return browser


def page_errors(browser) -> list[str]:
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
