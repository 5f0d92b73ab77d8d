"""`attnviz heads`: a row of statistics per (layer, head)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from attnviz.analysis.heads import COLUMN_HELP, Column
from attnviz.cli import options
from attnviz.core import BUILTIN


class TableFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


@options.model_settings
def heads(
    text: options.TextArgument,
    mode: options.ModeOption = None,
    target: options.TargetOption = None,
    model: options.ModelOption = BUILTIN,
    layer: options.LayerOption = "all",
    head: options.HeadOption = "all",
    sort: Annotated[
        Column,
        typer.Option(
            "--sort",
            case_sensitive=False,
            help="Column to sort by: statistics largest first; layer, head, top_key in order.",
        ),
    ] = Column.LAYER,
    reverse: Annotated[bool, typer.Option("--reverse", help="Reverse the sort order.")] = False,
    top: Annotated[
        int | None, typer.Option("--top", min=1, help="Only the first N rows, after sorting.")
    ] = None,
    output_format: Annotated[
        TableFormat,
        typer.Option("--format", "-f", case_sensitive=False, help="table, json or csv."),
    ] = TableFormat.TABLE,
    settings: options.ModelSettings = options.DEFAULT_SETTINGS,
) -> None:
    """Statistics per head: what kind of head is this?

    entropy: nats, averaged over query rows (ln n when uniform over n keys).
    distance: mean |query position - key position|, attention-weighted.
    sink: mean weight on the first token and special tokens. previous: mean
    weight on the token just before. self: mean weight on itself. top_key: the
    key with the most weight over all rows.
    """
    from attnviz.analysis.heads import as_dicts, head_statistics, sort_rows
    from attnviz.io import dump_json, read_texts

    extract = options.extraction(model=model, mode=mode, layer=layer, head=head, settings=settings)
    extract.prepare()
    maps = extract(options.only_one(read_texts(text)), target)
    rows = sort_rows(head_statistics(maps), sort, reverse)[:top]
    if output_format is TableFormat.JSON:
        options.write_stdout(dump_json({"schema_version": 1, "heads": as_dicts(rows)}))
        return
    if output_format is TableFormat.CSV:
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=[column.value for column in Column])
        writer.writeheader()
        writer.writerows(as_dicts(rows))
        options.write_stdout(buffer.getvalue())
        return
    from rich.table import Table

    from attnviz.tokens import display_label

    table = Table(
        title=f"{maps.model} · {maps.mode} attention · {len(maps.key_tokens)} key tokens",
        caption=" · ".join(f"{column}: {text}" for column, text in COLUMN_HELP.items()),
        caption_justify="left",
    )
    for column in Column:
        table.add_column(column.value, justify="left" if column is Column.TOP_KEY else "right")
    for row in rows:
        numbers = (row.entropy, row.distance, row.sink, row.previous, row.self)
        cells = ["–" if value is None else f"{value:.3f}" for value in numbers]
        table.add_row(str(row.layer), str(row.head), *cells, display_label(row.top_key))
    options.stdout_console(options.ColourChoice.AUTO, None).print(table)
