"""`attnviz diff`: how differently two models (or two saved runs) attend to the same input."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.environment import Environment, stdout_console
from attnviz.cli.settings import DEFAULT_READING, Reading, model_settings, reading_options
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import ThresholdExceeded, UsageError
from attnviz.inputs import read_texts
from attnviz.outputs import formats_named, refuse_unused
from attnviz.safe_text import display_label, spaces_shown
from attnviz.schema import envelope

if TYPE_CHECKING:
    from attnviz.analysis.diff import HeadDivergence
    from attnviz.maps import AttentionMaps

FormatOption = d.format_option(
    d.ReportFormat,
    f"{formats_named(d.REPORTS)}.",
)


SourcesArgument = Annotated[
    list[str],
    typer.Argument(
        metavar="TEXT | SOURCE SOURCE",
        help="TEXT (then --against is needed), or two saved maps files (json, ndjson, npz).",
    ),
]
AgainstOption = Annotated[
    str | None,
    typer.Option(
        "--against", metavar="MODEL", help="The second model, compared with --model on TEXT."
    ),
]
FailAboveOption = Annotated[
    float | None,
    typer.Option(
        "--fail-above",
        parser=d.number(0.0),
        metavar="DIVERGENCE",
        help="Exit with code 4 when any head's divergence is above this, 0 or more (for CI).",
    ),
]


@sharing(model_settings)
@reading_options
def diff(
    sources: SourcesArgument,
    against: AgainstOption = None,
    reading: Reading = DEFAULT_READING,
    target: d.TargetOption = None,
    fail_above: FailAboveOption = None,
    output_format: FormatOption = Output.TABLE,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Per-head Jensen-Shannon divergence between two models on one input, largest first.

    The divergence is in nats, averaged over query rows: 0 for identical maps,
    at most ln 2 ≈ 0.693. Both sides must have the same tokens, as two
    checkpoints of one model do. The built-in stack options apply to --model.
    """
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.diff import diff_maps
    from attnviz.data_formats import dump_json

    if len(sources) == 2:
        if against is not None:
            raise UsageError("give TEXT with --against, or two saved files without it")
        given = shared.run_options_given(reading, target, None)
        refuse_unused(given, "a model run on TEXT", "two saved files")
        first, second = (
            out.select_held(_one_record(s), reading.layer, reading.head) for s in sources
        )
    elif len(sources) == 1:
        if against is None:
            raise UsageError("diff TEXT needs --against MODEL (or give two saved files)")
        sides = [  # the built-in stack options describe --model, not --against
            shared.request(reading, text=sources[0], target=target),
            shared.request(
                replace(reading, model=against),
                settings=shared.settings.without_stack(),
                target=target,
            ),
        ]
        extractors = [side.open(shared.environment) for side in sides]
        text = out.only_one(read_texts(sources[0]))
        first, second = (
            side.maps(extractor, text) for side, extractor in zip(sides, extractors, strict=True)
        )
    else:
        raise UsageError("give one TEXT with --against, or two saved files")
    rows = diff_maps(first, second)
    if output_format is Output.JSON:
        heads = [row.__dict__ for row in rows]
        document = {"first": first.model, "second": second.model, "heads": heads}
        out.write_stdout(dump_json(envelope(document)))
    else:
        _print_table(first, second, rows, shared.environment)
    above = [row for row in rows if fail_above is not None and row.divergence > fail_above]
    if above:
        worst = max(above, key=lambda row: row.divergence)
        raise ThresholdExceeded(
            f"{len(above)} of {len(rows)} maps diverge by more than --fail-above {fail_above}; "
            f"the most: layer {worst.layer} head {worst.head}, {worst.divergence:.4f}"
        )


def _print_table(
    first: AttentionMaps,
    second: AttentionMaps,
    rows: list[HeadDivergence],
    environment: Environment,
) -> None:
    """The two models' names on a line of their own, then a row per map."""
    names = f"{display_label(first.model)} vs {display_label(second.model)}"
    # A line of its own: two model names are wider than the table, whose title would
    # wrap them a word per line.
    console = stdout_console(d.ColourChoice.AUTO, None, environment)
    console.print(
        f"{names} · {first.mode} attention", markup=False, highlight=False, soft_wrap=True
    )
    table = out.rows_table()
    for name in ("layer", "head", "divergence", "worst query"):
        table.add_column(name, justify="left" if name == "worst query" else "right")
    for row in rows:
        layer_cell = "all" if row.layer is None else str(row.layer)
        head_cell = "all" if row.head is None else str(row.head)
        divergence = f"{row.divergence:.4f}"
        table.add_row(layer_cell, head_cell, divergence, spaces_shown(row.worst_query))
    console.print(table)


def _one_record(source: str):
    """The one input a saved file holds; a file of several inputs is refused, not cut."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.maps_files import read_maps

    records = read_maps(source)
    first = next(records)
    if next(records, None) is not None:
        raise UsageError(
            f"{source} holds several inputs; diff compares one with one: save each input "
            "on its own (show --format json)"
        )
    return first
