"""`attnviz top`: for each query token, the key tokens it attends to most."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.cli import options
from attnviz.cli.heads import TableFormat
from attnviz.cli.show import AggregateOption
from attnviz.core import BUILTIN


@options.model_settings
def top(
    text: options.TextArgument,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    model: options.ModelOption = BUILTIN,
    layer: options.LayerOption = "all",
    head: options.HeadOption = "all",
    aggregate: AggregateOption = None,
    k: Annotated[int, typer.Option("-k", min=1, help="Key tokens per query token.")] = 3,
    output_format: Annotated[
        TableFormat,
        typer.Option("--format", "-f", case_sensitive=False, help="table (lines) or json."),
    ] = TableFormat.TABLE,
    settings: options.ModelSettings = options.DEFAULT_SETTINGS,
) -> None:
    """For each query token, its k most attended key tokens: one line per token.

    `is → attention 0.60, is 0.40`. A block per selected map, headed by its
    title; pick one head with --layer and --head, or combine with --aggregate.
    """
    from attnviz.analysis.aggregate import aggregate as combine
    from attnviz.analysis.top import top_keys
    from attnviz.errors import UsageError
    from attnviz.io import dump_json, read_texts
    from attnviz.tokens import display_label

    if output_format is TableFormat.CSV:
        raise UsageError("top writes table or json")
    extract = options.extraction(model=model, mode=mode, layer=layer, head=head, settings=settings)
    extract.prepare()
    maps = extract(options.only_one(read_texts(text)), target)
    if aggregate is not None:
        maps = combine(maps, aggregate)
    blocks = top_keys(maps, k)
    if output_format is TableFormat.JSON:
        options.write_stdout(dump_json({"schema_version": 1, "maps": blocks}))
        return
    lines = []
    for block in blocks:
        lines.append(f"# {block['title']}")
        for row in block["queries"]:
            picks = ", ".join(
                f"{display_label(pick['token'])} {pick['weight']:.2f}" for pick in row["top"]
            )
            lines.append(f"{display_label(row['token'])} → {picks}")
    options.write_stdout("\n".join(lines) + "\n")
