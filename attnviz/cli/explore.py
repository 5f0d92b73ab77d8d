"""`attnviz explore`: step through every layer, head and token in a full-screen app."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.settings import Reading, model_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError
from attnviz.inputs import read_texts

if TYPE_CHECKING:
    from attnviz.maps import AttentionMaps


@sharing(model_settings)
def explore(
    text: d.TextArgument,
    mode: d.ModeOption = None,
    target: d.TargetOption = None,
    model: d.ModelOption = d.BUILTIN,
    export_folder: Annotated[
        Path, typer.Option("--export-dir", metavar="FOLDER", help="Where `e` saves PNG pictures.")
    ] = Path("."),
    label_positions: d.LabelPositionsOption = False,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Explore the attention of every layer and head with the keyboard.

    ←/→ heads, ↑/↓ layers, g every layer × head, m aggregates (mean, max,
    rollout), v values, Tab/Shift-Tab the query token, / a new sentence, e
    export a PNG, ? keys, q quit. The maps are computed once per sentence.
    """
    if not (shared.environment.stdout_is_terminal and shared.environment.stderr_is_terminal):
        raise UsageError(
            "explore is a full-screen app: run it with stdout and stderr on a terminal "
            "(show writes data)"
        )
    if not export_folder.is_dir():
        raise UsageError(f"--export-dir {export_folder} is not a folder: create it first")
    asked = shared.request(Reading(model, mode), text=text, target=target)
    extractor = asked.open(shared.environment)

    def compute(sentence: str) -> AttentionMaps:
        maps = asked.maps(extractor, sentence)
        return maps.with_positions() if label_positions else maps

    maps = compute(out.only_one(read_texts(text)))
    # textual: after the options are checked (a usage error loads none)
    from attnviz.explore import ExploreApp

    ExploreApp(maps, compute, export_folder).run()
