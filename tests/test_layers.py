"""Layers one way: attnviz's modules import each other without cycles, the lazy
imports inside functions included (only imports for type checkers are left out)."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "attnviz"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(
    module: str, path: Path, tree: ast.Module, known: set[str], typed: bool = False
) -> set[str]:
    """The attnviz modules that ``module`` imports anywhere in its code, at run time (and
    for type checkers too, with ``typed``)."""
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if is_type_checking_block(node) and not typed
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                package = module.split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                package = package[: len(package) - (node.level - 1)]
                source = ".".join([*package, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names}
            found |= submodules  # those that are submodules count, not their package
            if not submodules <= known:  # a name the package itself holds
                found.add(source)
    return {name for name in found if name in known and name != module}


def import_graph(typed: bool = False) -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {
        module: imported(module, path, ast.parse(path.read_text()), known, typed)
        for module, path in paths.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                lowest[module] = min(lowest[module], lowest[other])
            elif other in stack:
                lowest[module] = min(lowest[module], index[other])
        if lowest[module] == index[module]:
            component = []
            while (member := stack.pop()) != module:
                component.append(member)
            if component:
                found.append(sorted([module, *component]))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_walker_sees_a_cycle_through_a_lazy_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    source = "def f():\n    from attnviz.maps import AttentionMaps\n"
    tree = ast.parse(source)
    assert imported(
        "attnviz.data_formats", PACKAGE / "data_formats.py", tree, {"attnviz.maps"}
    ) == {"attnviz.maps"}
    hidden = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import attnviz.maps\n"
    assert (
        imported(
            "attnviz.data_formats", PACKAGE / "data_formats.py", ast.parse(hidden), {"attnviz.maps"}
        )
        == set()
    )


def test_attnviz_has_no_import_cycles():
    assert cycles(import_graph()) == []


def test_no_circle_even_counting_the_imports_for_type_checkers():
    assert cycles(import_graph(typed=True)) == []


RESULTS = [
    "attnviz.maps",
    "attnviz.maps_conveniences",
    "attnviz.circuits.circuit",
    *(f"attnviz.analysis.{name}" for name in ("effects", "heads", "lens", "trace")),
]


def below(module: str, graph: dict[str, set[str]]) -> set[str]:
    """Every module ``module`` reaches through its imports."""
    found, waiting = set(), [module]
    while waiting:
        for other in graph[waiting.pop()] - found:
            found.add(other)
            waiting.append(other)
    return found


def test_a_result_reaches_no_renderer_but_through_the_drawer():
    """A result is data: neither it nor anything it imports (for type checkers too) is a
    renderer or the module that draws results; it asks attnviz.drawing.drawer() for that
    module by name, and every name it asks of it is there."""
    from attnviz import drawing

    graph = import_graph(typed=True)
    for result in RESULTS:
        drawn = {name for name in below(result, graph) if name.startswith("attnviz.render")}
        assert drawn | ({drawing.DRAWER} & below(result, graph)) == set(), result
    asked = {
        node.attr
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "drawer"
    }
    assert len(asked) >= 10
    assert [name for name in sorted(asked) if not hasattr(drawing.drawer(), name)] == []


def test_the_maps_build_only_on_the_lowest_modules():
    """AttentionMaps is data: it needs the choices, the errors, the schema, the token-grid
    operations and products, what it records of a request, the encodings of the data
    formats it is read from, and its conveniences (which reach the module above it through
    attnviz.drawing.drawer()); none of them imports the maps."""
    tree = ast.parse((PACKAGE / "maps.py").read_text())
    at_import = {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnviz")
    }
    assert at_import <= {
        "attnviz.choices",
        "attnviz.data_formats",
        "attnviz.errors",
        "attnviz.schema",
        "attnviz.analysis.grid",
        "attnviz.analysis.products",
        "attnviz.maps_conveniences",
        "attnviz.request",
        "attnviz.selection",
    }
    graph = import_graph(typed=True)
    assert not any("attnviz.maps" in below(module, graph) for module in at_import)


LONGEST_FUNCTION = 60  # code lines: not blank, not a comment, not the docstring


def code_lines(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of a function that hold code: its blank lines, comments and docstring
    left out."""
    first = node.body[0]
    documented = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    docstring = range(first.lineno, first.end_lineno + 1) if documented else range(0)
    return sum(
        1
        for number in range(node.lineno, node.end_lineno + 1)
        if number not in docstring
        and (text := lines[number - 1].strip())
        and not text.startswith("#")
    )


def test_the_function_measure_counts_code_alone():
    source = 'def f(a):\n    """Doc.\n\n    More."""\n    # why\n\n    return a\n'
    (function,) = ast.parse(source).body
    assert code_lines(source.splitlines(), function) == 2


def test_no_function_is_longer_than_a_screen():
    """A unit that fits a screen is read whole; one past it is split by concern."""
    longer = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = code_lines(text.splitlines(), node)
                if lines > LONGEST_FUNCTION:
                    longer.append(f"{path.relative_to(PACKAGE.parent)}::{node.name} ({lines})")
    assert longer == []


LONGEST_MODULE = 500  # lines
LONG_MODULE, LONG_MODULES_AT_MOST = 400, 12


def test_no_module_is_longer_than_a_few_screens():
    """A module past this holds more than one concern: split it by concern. A few may
    come near it, not many."""
    counts = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert [f"{name} ({count})" for name, count in counts.items() if count > LONGEST_MODULE] == []
    long = sorted(name for name, count in counts.items() if count > LONG_MODULE)
    assert len(long) <= LONG_MODULES_AT_MOST, long


# Places that repeat six or more lines of the same shape, as the workplace's `duplicates`
# tool counts them (what is left is mostly signatures and field lists a command or a
# protocol must spell out).
MOST_REPEATED_PLACES = {"attnviz": 12, "tests": 6}


@pytest.mark.skipif(shutil.which("duplicates") is None, reason="no `duplicates` tool here")
@pytest.mark.parametrize("folder", sorted(MOST_REPEATED_PLACES))
def test_few_places_repeat_each_other(folder: str):
    """What one piece of code can serve is written once."""
    found = subprocess.run(
        ["duplicates", "--seconds", "120"],
        cwd=PACKAGE.parent / folder,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "incomplete:" not in found, found
    first = found.splitlines()[0]
    count = 0 if first.startswith("no duplicates") else int(first.split()[0])
    assert count <= MOST_REPEATED_PLACES[folder], found


MOST_PUBLIC_METHODS = 15


def test_no_class_offers_more_than_a_reader_can_hold():
    """A class's own body defines at most this many public methods and properties; a
    larger interface is grouped by concern into parts it is made of (as AttentionMaps'
    conveniences, MapsConveniences), or reached through a door it already has (many
    inputs through Extractor.run)."""
    larger = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                public = [
                    member.name
                    for member in node.body
                    if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
                    and not member.name.startswith("_")
                ]
                if len(public) > MOST_PUBLIC_METHODS:
                    larger.append(f"{path.relative_to(PACKAGE.parent)}::{node.name}")
    assert larger == []


def test_no_test_module_imports_another():
    """What tests share lives in modules of their own (checks.py, hook_references.py,
    processes.py, tiny_models.py) or in conftest.py's fixtures, never in a test module."""
    tests = Path(__file__).parent
    found = []
    for path in tests.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            ) + ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "tests":
                names += [f"tests.{alias.name}" for alias in node.names]
            found += [f"{path.name}: {name}" for name in names if name.startswith("tests.test_")]
    assert found == []


def test_every_import_inside_a_function_says_why():
    """attnviz's own modules are imported at the top; one imported inside a function
    says why on its line or in a comment over its block of imports (a heavy module
    loaded only when needed, or a cycle)."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for function in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                    "attnviz"
                ):
                    continue
                said = any("#" in line for line in lines[node.lineno - 1 : node.end_lineno])
                above = node.lineno - 2
                while not said and above >= 0:
                    line = lines[above].strip()
                    said = line.startswith("#")
                    if not (line.startswith("from attnviz") or line.endswith((",", "(", ")"))):
                        break
                    above -= 1
                if not said:
                    unexplained.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert unexplained == []
