"""The README and the manual: the command-line reference is the commands' own help, the
README's links lead somewhere, and its Python example runs as written."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest

from tests.docs_commands import ShownRun, assert_printed, output_of, shown_runs

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


def test_the_performance_page_holds_the_present_figures_only():
    """Each benchmark's latest table, with its command: how figures moved is git's."""
    page = (ROOT / "docs" / "performance.md").read_text()
    assert len(page.splitlines()) < 300
    for section in re.split(r"^## ", page, flags=re.M)[1:]:
        assert "benchmarks/" in section, section.splitlines()[0]  # the command that made it


def test_no_doc_speaks_of_the_work_sessions_that_wrote_it():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    said = [path.name for path in pages if re.search(r"\bsessions?\b", path.read_text(), re.I)]
    assert said == []


def python_blocks() -> list[tuple[str, int, str]]:
    """Every Python block of the README and the manual: (file, its number, its code)."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"^( *)```python\n(.*?)^\1```", path.read_text(), re.M | re.S)
        for number, (indent, code) in enumerate(blocks, start=1):
            lines = [line.removeprefix(indent) for line in code.splitlines()]
            found.append((str(path.relative_to(ROOT)), number, "\n".join(lines) + "\n"))
    return found


# The blocks that read a model only the integration tests have; `path` is a block's own
# placeholder for a checkpoint (a tiny language model here).
REAL_MODELS = {("docs/effects.md", 1): "smollm2", ("docs/python.md", 2): "smollm2"}


def _claim(comment: str) -> str | None:
    """What a comment says a value is: the literal (or a repr) it begins with, up to the
    first ': ' outside brackets and quotes; None for a comment in words."""
    if not re.match(r"[(\[{'\-0-9]|[A-Za-z_]\w*\(", comment):
        return None
    depth, quote = 0, ""
    for index, character in enumerate(comment):
        if quote:
            quote = "" if character == quote else quote
        elif character in "'\"":
            quote = character
        elif character in "([{":
            depth += 1
        elif character in ")]}":
            depth -= 1
        elif depth == 0 and comment.startswith(": ", index):
            return comment[:index]
    return comment


def _shown(value, node: ast.expr) -> str:
    """A value as its comment writes it: Python numbers for numpy's, a tuple's items
    without its parentheses where the line lists them."""
    import numpy as np

    def plain(each):
        return each.item() if isinstance(each, np.generic) else each

    if isinstance(node, ast.Tuple):
        return ", ".join(repr(plain(each)) for each in value)
    return repr(plain(value))


def run_block(code: str, where: str, namespace: dict) -> int:
    """Each statement of ``code`` run in ``namespace``; each expression whose line ends in
    a comment of a value held to it ("…" stands for any characters). Returns how many
    were checked."""
    lines = code.splitlines()
    checked = 0
    for statement in ast.parse(code).body:
        compiled = ast.Module([statement], type_ignores=[])
        if not isinstance(statement, ast.Expr):
            exec(compile(compiled, where, "exec"), namespace)
            continue
        value = eval(compile(ast.Expression(statement.value), where, "eval"), namespace)
        last = lines[statement.end_lineno - 1]
        comment = last.split("  # ", 1)[1] if "  # " in last else ""
        claim = _claim(comment)
        if claim is None:
            continue
        shown = _shown(value, statement.value)
        assert _holds(claim, shown), f"{where} line {statement.lineno}: {shown}"
        checked += 1
    return checked


_ROUNDED = re.compile(r"(-?\d+\.\d+)…")  # a number written to its first digits


def _holds(claim: str, shown: str) -> bool:
    """Whether ``shown`` is what ``claim`` says: its text, "…" standing for any characters,
    a number written "6.77…" for any number that rounds to it."""
    pattern, numbers = "", []
    for index, part in enumerate(_ROUNDED.split(claim)):
        if index % 2:  # a rounded number
            numbers.append(part)
            pattern += r"(-?[0-9.]+(?:e-?[0-9]+)?)"
        else:
            pattern += ".*?".join(re.escape(piece) for piece in part.split("…"))
    found = re.fullmatch(pattern, shown, re.S)
    return found is not None and all(
        abs(float(got) - float(written)) <= 0.5 * 10 ** -len(written.split(".")[1]) * 1.0001
        for got, written in zip(found.groups(), numbers, strict=True)
    )


@pytest.mark.parametrize(
    ("document", "number", "code"),
    [
        pytest.param(*block, marks=pytest.mark.smollm2) if block[:2] in REAL_MODELS else block
        for block in python_blocks()
    ],
    ids=[f"{document}#{number}" for document, number, _ in python_blocks()],
)
def test_every_python_block_of_the_docs_runs_and_says_what_it_gives(
    monkeypatch, tmp_path, generators, document, number, code
):
    """The README said (1, 4, 8, 8) where the code gives (1, 4, 7, 7)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sample_texts").symlink_to(ROOT / "sample_texts")
    namespace: dict = {"path": generators["llama-lm"]}
    checked = run_block(code, f"{document} block {number}", namespace)
    if document == "README.md":
        assert checked == 1 and (tmp_path / "layer2.pdf").read_bytes().startswith(b"%PDF")


def test_a_wrong_comment_fails_the_block():
    with pytest.raises(AssertionError, match="line 1"):
        run_block("(1, 4, 7, 7)  # (1, 4, 8, 8): layers\n", "example", {})
    with pytest.raises(AssertionError, match="line 1"):
        run_block("6.7812  # 6.77…\n", "example", {})
    checks = "6.7712  # 6.77…\n-1.69997  # -1.70…\n[0], [1, 2]  # [0], [1, 2]: words\n"
    assert run_block(checks + "x = 1  # (2)\n", "example", {}) == 3


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


def test_the_documented_request_names_every_field_with_its_default():
    """docs/python.md's signature left out eight fields added since it was written."""
    from dataclasses import MISSING, fields
    from enum import Enum

    from attnviz import Request

    line = next(
        line
        for line in (ROOT / "docs" / "python.md").read_text().splitlines()
        if line.startswith("- `attnviz.Request(")
    )
    documented = line.split("(", 1)[1].rsplit(")`", 1)[0]
    expected = []
    for field in fields(Request):
        default = field.default
        shown = f'"{default.value}"' if isinstance(default, Enum) else repr(default)
        expected.append(f"{field.name}={shown}" if default is not MISSING else field.name)
    assert documented == ", ".join(expected)


def test_every_benchmark_the_docs_cite_imports_with_todays_names():
    """A benchmark's figures are remade by running it: each script must still import the
    names it reads of attnviz (one process imports them all, as their siblings do)."""
    import subprocess
    import sys

    benchmarks = Path(__file__).parent.parent / "benchmarks"
    names = sorted(path.stem for path in benchmarks.glob("*.py") if path.stem != "__init__")
    assert len(names) >= 10
    found = subprocess.run(
        [sys.executable, "-c", "; ".join(f"import {name}" for name in names)],
        cwd=benchmarks.parent,  # some import `benchmarks.x`, some their siblings by name
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(benchmarks.parent), str(benchmarks)]),
        },
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr[-2000:]


def _pages() -> dict[str, str]:
    """The README and every page of the manual, by name."""
    pages = {path.name: path.read_text(encoding="utf-8") for path in (ROOT / "docs").glob("*.md")}
    return pages | {"README.md": README}


def _screenshots() -> set[str]:
    """What docs/screenshots.py makes (its MADE_HERE), read without running it."""
    tree = ast.parse((ROOT / "docs" / "screenshots.py").read_text(encoding="utf-8"))
    (made,) = (
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "MADE_HERE"
    )
    return set(ast.literal_eval(made))


def test_every_picture_the_docs_show_has_its_maker():
    """Each picture in docs/ is shown by a page, and is written by a command a page prints
    (``-o docs/NAME`` or ``--picture docs/NAME`` in a shell block) or by
    docs/screenshots.py: none is left that nothing in the repository makes."""
    pages = _pages()
    shown = {
        name
        for text in pages.values()
        for name in re.findall(r"\]\((?:docs/)?([\w.-]+\.png)\)", text)
    }
    files = {path.name for path in (ROOT / "docs").glob("*.png")}
    assert shown == files
    blocks = [
        block for text in pages.values() for block in re.findall(r"```sh\n(.*?)```", text, re.S)
    ]
    written = {
        name
        for block in blocks
        for name in re.findall(r"(?:-o|--picture) docs/([\w.-]+\.png)", block)
    }
    made_here = _screenshots()
    assert not written & made_here  # one maker each
    assert sorted(files - written - made_here) == []


SHOWN_RUNS = shown_runs()


def test_every_command_the_docs_print_the_output_of_is_run_by_a_test():
    """The built-in stack's commands run here; SmolLM2's in make integration
    (tests/test_smollm2.py); a page that printed another model's output would need its own."""
    assert len(SHOWN_RUNS) >= 5
    assert {run.model for run in SHOWN_RUNS} <= {"builtin", "smollm2"}


def test_the_held_output_fails_on_a_changed_number_and_passes_a_measured_time():
    run = ShownRun("page", ("show",), ("a 0.58 b, about 684 s",), terminal=True)
    assert_printed(run, "a 0.581 b, about 845 s\nmore")
    with pytest.raises(AssertionError):
        assert_printed(run, "a 0.63 b, about 684 s")


@pytest.mark.parametrize("run", [run for run in SHOWN_RUNS if run.model == "builtin"], ids=str)
def test_a_command_the_docs_print_gives_what_they_print(run, runner):
    assert_printed(run, output_of(run, runner, ROOT))


def test_every_worked_example_applies_to_todays_tree():
    """The development guide's patches (docs/examples) apply as they are (or are applied
    already: tests/test_examples.py runs this suite in a tree with one of them in): make
    integration runs each whole, this checks in a second that no change since has moved
    the lines they touch."""
    import subprocess

    def applies(patch: Path, *how: str) -> subprocess.CompletedProcess:
        check = ["git", "apply", "--check", *how, "-p1", str(patch)]
        return subprocess.run(check, cwd=ROOT, capture_output=True, text=True)

    patches = sorted((ROOT / "docs" / "examples").glob("*.patch"))
    assert patches
    for patch in patches:
        found = applies(patch)
        if found.returncode != 0:
            assert applies(patch, "--reverse").returncode == 0, f"{patch.name}: {found.stderr}"


def _map_rows() -> list[str]:
    """The rows of docs/development.md's tables of where things are and of each
    vocabulary's home."""
    guide = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    part = guide[guide.index("Where things are:") : guide.index("What an input must hold")]
    return [line for line in part.splitlines() if line.startswith("| ") and "`" in line]


def _defined(path: Path) -> set[str]:
    """The names a module defines: its functions, classes and assignments, and its
    classes' own."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {target.id for target in targets if isinstance(target, ast.Name)}
    return found


_NOT_MODULES = (".md", ".yml", ".jsonl", ".json", ".patch")


def test_the_map_of_where_things_live_matches_the_tree():
    """Every file the development guide's map names is there (a row of a folder names
    its files inside it), and every ``module.name`` and ``file.py`` ``name`` it cites is
    defined in that module."""
    package = ROOT / "attnviz"
    modules: dict[str, list[Path]] = {}
    for path in package.rglob("*.py"):
        modules.setdefault(path.stem, []).append(path)
    missing, checked = [], 0
    for row in _map_rows():
        ticks = re.findall(r"`([^`]+)`", row)
        folder = ROOT / ticks[0] if ticks[0].endswith("/") else package
        # a file and, right after it, a name it defines: "`circuits/passes.py` `scored`"
        named = dict(re.findall(r"`([\w/]+\.py)` `([A-Za-z_]\w*)`", row))
        for tick in ticks:
            after = named.get(tick, "")
            if re.fullmatch(r"[\w/]+\.py", tick):
                where = [folder / tick, package / tick.removeprefix("attnviz/"), ROOT / tick]
                found = next((path for path in where if path.is_file()), None)
                if found is None:
                    missing.append(tick)
                elif re.fullmatch(r"[A-Za-z_]\w*", after) and after not in _defined(found):
                    missing.append(f"{tick} {after}")
                checked += 1
            elif re.fullmatch(r"[a-z_]+\.[A-Za-z_]\w*", tick) and not tick.endswith(_NOT_MODULES):
                module, name = tick.split(".")
                if not any(name in _defined(path) for path in modules.get(module, [])):
                    missing.append(tick)
                checked += 1
    assert missing == [], missing
    assert checked > 100, checked  # the map was read
