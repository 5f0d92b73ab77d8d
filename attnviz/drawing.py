"""A picture's bytes, and how a result reaches what draws it.

A result (attention maps, head effects, a trace, a lens, a knockout, a circuit) is data:
no result's module imports a renderer, at run time or for type checkers. The render
package draws results, so it stands above them, and :mod:`attnviz.notebook` above both
offers what a Python caller asks of a result (its picture, its page, a file of it). A
result's ``picture()``, ``save()`` and notebook display reach that module through
:func:`drawer`, by name, when first asked (as pandas reaches its plotting backend): the
results import and type-check without the renderers and matplotlib.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from attnviz.atomic_files import open_output
from attnviz.choices import Output
from attnviz.errors import UsageError
from attnviz.outputs import PICTURES, output_of_file

# The module above every result and renderer that draws and writes results for Python
# callers; tests/test_layers.py checks that it exists and that nothing below it names it.
DRAWER = "attnviz.notebook"


def drawer() -> ModuleType:
    """:mod:`attnviz.notebook`, imported when a result is first drawn."""
    return importlib.import_module(DRAWER)


@dataclass(frozen=True)
class Picture:
    """A picture's bytes: a notebook shows a PNG or an SVG picture inline."""

    data: bytes
    format: Output

    def __repr__(self) -> str:
        """Its kind and size: a notebook prints this beside the picture, not its bytes."""
        return f"<Picture {self.format.value}, {len(self.data):,} bytes>"

    def save(self, path: str | Path) -> None:
        """Write the picture to ``path`` (whole or not at all), whose suffix names its
        format: ``circuit.picture("svg").save("circuit.svg")``."""
        named = output_of_file(path, PICTURES)
        if named is not self.format:
            raise UsageError(
                f"{path} names a {named.value} picture; this one is {self.format.value}: ask "
                f'for .picture("{named.value}"), or name the file .{self.format.value}'
            )
        with open_output(path, binary=True) as out:
            out.write(self.data)

    def _repr_png_(self) -> bytes | None:
        return self.data if self.format is Output.PNG else None

    def _repr_svg_(self) -> str | None:
        return self.data.decode() if self.format is Output.SVG else None
