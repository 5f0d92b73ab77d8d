"""`attnviz explore`: step through every layer, head and token in a full-screen app."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.core import BUILTIN


@options.model_settings
def explore(
    text: options.TextArgument,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    model: options.ModelOption = BUILTIN,
    export_folder: Annotated[
        Path, typer.Option("--export-dir", help="Where `e` saves PNG pictures.")
    ] = Path("."),
    settings: options.ModelSettings = options.DEFAULT_SETTINGS,
) -> None:
    """Explore the attention of every layer and head with the keyboard.

    ←/→ heads, ↑/↓ layers, g the layer's grid, m aggregates (mean, max,
    rollout), v values, Tab/Shift-Tab the query token, / a new sentence, e
    export a PNG, ? keys, q quit. The maps are computed once per sentence.
    """
    from attnviz.errors import UsageError
    from attnviz.io import read_texts

    if not sys.stdout.isatty():
        raise UsageError("explore is a full-screen app: run it in a terminal (show writes data)")
    extract = options.extraction(model=model, mode=mode, layer="all", head="all", settings=settings)
    extract.prepare()
    maps = extract(options.only_one(read_texts(text)), target)
    from attnviz.explore import ExploreApp

    ExploreApp(maps, lambda sentence: extract(sentence, target), export_folder).run()
