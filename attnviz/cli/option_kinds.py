"""Options several commands have, each with its own help: their names, metavar and
bounds declared here once (as :func:`~attnviz.cli.declarations.format_option` declares
--format), each command giving what the option means there; and how a size is read."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from attnviz.errors import UsageError


def output_option(help: str, kind: Any = str | None, **more: Any) -> Any:
    """--output (-o) PATH: where a command writes (``kind``: what the command gets)."""
    return Annotated[kind, typer.Option("--output", "-o", metavar="PATH", help=help, **more)]


def picture_option(help: str, *also: str) -> Any:
    """--picture PATH: a picture drawn beside what the command writes (``also``: its other
    names, ``-o`` where the picture is what the command writes)."""
    return Annotated[str | None, typer.Option("--picture", *also, metavar="PATH", help=help)]


def top_heads_option(help: str, **more: Any) -> Any:
    """--top-heads N: how many of the best heads to draw."""
    return Annotated[int | None, typer.Option("--top-heads", metavar="N", min=1, help=help, **more)]


def max_new_tokens_option(most: int, help: str, **more: Any) -> Any:
    """--max-new-tokens (-n) N: how many tokens a model may write, at most ``most``."""
    option = typer.Option("--max-new-tokens", "-n", metavar="N", min=1, max=most, help=help, **more)
    return Annotated[int, option]


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def memory_size(text: str) -> int:
    """Bytes from ``256M``, ``1G``, ``512K`` or a plain number of bytes."""
    number, unit = text.strip().upper().rstrip("B").rstrip("I"), ""
    if number[-1:] in _UNITS:
        number, unit = number[:-1], number[-1]
    try:
        size = int(float(number) * _UNITS[unit])
    except ValueError:
        size = 0
    if size < 2**20:
        raise UsageError(f"--memory takes a size of at least 1M, such as 256M or 1G, not {text!r}")
    return size
