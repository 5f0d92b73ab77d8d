"""`attnviz heads`: a row of statistics per (layer, head)."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.choices import HeadColumn
from attnviz.cli import declarations as d
from attnviz.cli.output import NO_TERMINAL, Environment, with_environment
from attnviz.cli.settings import DEFAULT_SETTINGS, ModelSettings, model_settings


@model_settings
@with_environment
def heads(
    text: d.OptionalTextArgument = None,
    saved: d.FromOption = None,
    mode: d.ModeOption = None,
    target: d.TargetOption = None,
    pair: d.PairOption = None,
    model: d.ModelOption = d.BUILTIN,
    layer: d.LayerOption = "all",
    head: d.HeadOption = "all",
    sort: Annotated[
        HeadColumn,
        typer.Option(
            "--sort",
            metavar="COLUMN",
            case_sensitive=False,
            help="Column to sort by: statistics largest first; layer, head, top_key_position "
            "and top_key in order.",
        ),
    ] = HeadColumn.LAYER,
    reverse: Annotated[bool, typer.Option("--reverse", help="Reverse the sort order.")] = False,
    top: Annotated[
        int | None,
        typer.Option("--top", metavar="N", min=1, help="Only the first N rows, after sorting."),
    ] = None,
    output_format: Annotated[
        d.TableFormat,
        typer.Option(
            "--format", "-f", metavar="FORMAT", case_sensitive=False, help="table, json or csv."
        ),
    ] = d.TableFormat.TABLE,
    environment: Environment = NO_TERMINAL,
    settings: ModelSettings = DEFAULT_SETTINGS,
) -> None:
    """Statistics per head: what kind of head is this?

    entropy: nats, averaged over query rows (ln n when uniform over n keys).
    distance: mean |query position - key position|, attention-weighted.
    sink: mean weight on the first token and special tokens. previous: mean
    weight on the token just before. self: mean weight on itself. top_key: the
    key with the most weight over all rows, and top_key_position its position.
    """
    from attnviz.analysis.heads import COLUMN_HELP, HeadTable, as_dicts, sort_rows
    from attnviz.cli import output as out
    from attnviz.cli.settings import model_options_given, request
    from attnviz.io import dump_json
    from attnviz.schema import envelope

    asked = request(
        model=model, mode=mode, layer=layer, head=head, settings=settings, text=text, target=target
    )

    def statistics(line: str) -> HeadTable:
        extractor = asked.open(environment)
        return extractor.head_statistics(line, asked.request, target=target, pair=pair)

    several = "attnviz stats gives these statistics over many inputs"
    given = model_options_given(settings, model, mode, target, pair)
    table = out.text_or_saved(text, saved, statistics, layer, head, given, several, HeadTable.of)
    rows = sort_rows(table.rows, sort, reverse)[:top]
    if output_format is d.TableFormat.JSON:
        out.write_stdout(dump_json(envelope({"heads": as_dicts(rows)})))
        return
    if output_format is d.TableFormat.CSV:
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=[column.value for column in HeadColumn])
        writer.writeheader()
        writer.writerows(as_dicts(rows))
        out.write_stdout(buffer.getvalue())
        return
    from rich.table import Table

    from attnviz.tokens import display_label

    table = Table(
        title=f"{display_label(table.model)} · {table.mode} attention · "
        f"{table.key_count} key tokens",
        caption=" · ".join(f"{column}: {text}" for column, text in COLUMN_HELP.items()),
        caption_justify="left",
    )
    for column in HeadColumn:
        table.add_column(column.value, justify="left" if column is HeadColumn.TOP_KEY else "right")
    for row in rows:
        numbers = (row.entropy, row.distance, row.sink, row.previous, row.self)
        cells = ["–" if value is None else f"{value:.3f}" for value in numbers]
        place = (str(row.layer), str(row.head))
        table.add_row(*place, *cells, str(row.top_key_position), display_label(row.top_key))
    out.stdout_console(d.ColourChoice.AUTO, None, environment).print(table)
