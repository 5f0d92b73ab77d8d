"""The README and the manual: the command-line reference is the commands' own help, the
README's links lead somewhere, and its Python example runs as written."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _cli_reference():
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs" / "cli_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_command_line_reference_is_the_commands_help():
    reference = _cli_reference()
    assert reference.PAGE.read_text(encoding="utf-8") == reference.page(), (
        "docs/cli.md is stale: run python docs/cli_reference.py"
    )


def test_the_reference_holds_every_command_and_option():
    """Generated, not copied: an option added to a command appears in the page."""
    from attnviz.cli.app import COMMANDS

    page = _cli_reference().page()
    for name in COMMANDS:
        assert f"## `attnviz {name}`" in page
    assert "--fail-above" in page and "--rows" in page and "--span" in page


def test_the_readme_links_lead_to_files_that_exist():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [target for target in targets if "://" not in target]
    assert local, "the README links to the manual"
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing


def test_the_readme_fits_about_two_screens():
    assert len(README.splitlines()) <= 80


@pytest.mark.minilm
def test_the_readme_python_example_runs(monkeypatch, tmp_path):
    code = README.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["maps"].layers == [2]
    assert namespace["maps"].heads == [0, 1, 2, 3]
    assert (tmp_path / "layer2.pdf").read_bytes().startswith(b"%PDF")


def test_the_formats_the_docs_and_the_help_list_are_the_registrys():
    """docs/batch.md left html out; help texts listed formats by hand."""
    from attnviz.cli import declarations as d
    from attnviz.outputs import BATCH, formats_named

    docs = ROOT / "docs"
    listed = re.search(r"`--format ([a-z|]+)`, repeatable", (docs / "batch.md").read_text())
    assert listed is not None and listed[1].split("|") == [output.value for output in BATCH]
    reference = (docs / "cli.md").read_text()
    for command, formats in (("batch", BATCH), ("heads", d.TABLES), ("diff", d.REPORTS)):
        section = reference.split(f"## `attnviz {command}`")[1].split("\n## ")[0]
        line = " ".join(section.split("--format FORMAT", 1)[1].split())
        assert line.startswith(formats_named(formats)), (command, line)
