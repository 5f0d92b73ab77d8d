"""Options several commands have, each with its own help: their names, metavar and
bounds declared here once (as :func:`~attnviz.cli.declarations.format_option` declares
--format), each command giving what the option means there."""

from __future__ import annotations

from typing import Annotated, Any

import typer


def output_option(help: str, kind: Any = str | None, **more: Any) -> Any:
    """--output (-o) PATH: where a command writes (``kind``: what the command gets)."""
    return Annotated[kind, typer.Option("--output", "-o", metavar="PATH", help=help, **more)]


def picture_option(help: str) -> Any:
    """--picture PATH: a picture drawn beside what the command writes."""
    return Annotated[str | None, typer.Option("--picture", metavar="PATH", help=help)]


def top_heads_option(help: str, **more: Any) -> Any:
    """--top-heads N: how many of the best heads to draw."""
    return Annotated[int | None, typer.Option("--top-heads", metavar="N", min=1, help=help, **more)]


def max_new_tokens_option(most: int, help: str, **more: Any) -> Any:
    """--max-new-tokens (-n) N: how many tokens a model may write, at most ``most``."""
    option = typer.Option("--max-new-tokens", "-n", metavar="N", min=1, max=most, help=help, **more)
    return Annotated[int, option]
