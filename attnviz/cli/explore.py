"""`attnviz explore`: step through every layer, head and token in a full-screen app."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.core import BUILTIN


def explore(
    text: options.TextArgument,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    model: options.ModelOption = BUILTIN,
    export_folder: Annotated[
        Path, typer.Option("--export-dir", help="Where `e` saves PNG pictures.")
    ] = Path("."),
    special: options.SpecialOption = True,
    words: options.WordsOption = False,
    download: options.DownloadOption = False,
    trust_remote_code: options.TrustRemoteCodeOption = False,
    allow_pickle: options.AllowPickleOption = False,
    verbose: options.VerboseOption = False,
    layers: options.LayersOption = None,
    heads: options.HeadsOption = None,
    d_model: options.DModelOption = None,
    seed: options.SeedOption = None,
    positions: options.PositionsOption = None,
    projections: options.ProjectionsOption = None,
    keep_case: options.KeepCaseOption = False,
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
    extract = options.extraction(
        model=model,
        mode=mode,
        layer="all",
        head="all",
        special=special,
        words=words,
        download=download,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
        verbose=verbose,
        layers=layers,
        heads=heads,
        d_model=d_model,
        seed=seed,
        positions=positions,
        projections=projections,
        keep_case=keep_case,
    )
    extract.prepare()
    maps = extract(options.single_text(read_texts(text)), target)
    from attnviz.explore import ExploreApp

    ExploreApp(maps, lambda sentence: extract(sentence, target), export_folder).run()
