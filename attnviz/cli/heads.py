"""`attnviz heads`: a row of statistics per (layer, head)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnviz.atomic_files import check_writable, open_output
from attnviz.choices import Ablation, Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.answer_settings import Effects, effect_options
from attnviz.cli.environment import Environment, stdout_console
from attnviz.cli.option_kinds import picture_option
from attnviz.cli.output import number
from attnviz.cli.pictures import PictureSettings, figure_settings
from attnviz.cli.settings import Job, model_settings, row_products
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.cli.sources import NOTHING_READ, TextOrSaved, text_or_saved
from attnviz.errors import UsageError
from attnviz.head_columns import Detector, HeadColumn, Needs
from attnviz.outputs import PICTURES, formats_named, output_of_file, refuse_unused
from attnviz.request import PREDICTIONS, asked_for
from attnviz.safe_text import display_label, spaces_shown
from attnviz.selection import index_span
from attnviz.writers import write_table

if TYPE_CHECKING:
    from rich.console import Group

    from attnviz.analysis.effects import HeadEffects, Knockout
    from attnviz.analysis.heads import HeadTable
    from attnviz.head_columns import HeadStatistics
    from attnviz.render.style import Style
    from attnviz.results import Result

FormatOption = d.format_option(
    d.TableFormat,
    f"{formats_named(d.TABLES)}.",
)


SortOption = Annotated[
    HeadColumn | None,
    typer.Option(
        "--sort",
        metavar="COLUMN",
        case_sensitive=False,
        help="Column to sort by: statistics and dla largest first; ablation, layer, head, "
        "top_key_position and top_key in order. [default: layer, the --detect score, or "
        "ablation with --answer]",
        show_default=False,
    ),
]
ReverseOption = Annotated[bool, typer.Option("--reverse", help="Reverse the sort order.")]
PictureOption = picture_option(
    "With --answer, also draw the layers × heads grid of an effect (the --sort "
    "column if it is one, else patch with --corrupt, else ablation) in diverging colours "
    "(.png, .svg or .pdf)."
)
TERMINAL_ROWS = 20  # a terminal's table shows this many rows unless --top says otherwise
TopOption = Annotated[
    str | None,
    typer.Option(
        "--top",
        metavar="N",
        help="Only the first N rows, after sorting; all: every row. [default: the first "
        f"{TERMINAL_ROWS} in a terminal's table, every row elsewhere]",
        show_default=False,
    ),
]
PredictionsOption = Annotated[
    int | None,
    typer.Option(
        "--predictions",
        metavar="N",
        min=1,
        max=PREDICTIONS,
        help="With --answer, the model's N likeliest next tokens after the text, with their "
        "probabilities, above the table (json: predictions).",
    ),
]


@sharing(effect_options, row_products, model_settings, figure_settings)
@text_or_saved
def heads(
    source: TextOrSaved = NOTHING_READ,
    detect: d.DetectOption = None,
    sort: SortOption = None,
    reverse: ReverseOption = False,
    top: TopOption = None,
    output_format: FormatOption = Output.TABLE,
    picture: PictureOption = None,
    predictions: PredictionsOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Statistics per head: what kind of head is this, and what does the answer need?

    {statistics} top_key: the key with the most weight over all rows, and
    top_key_position its position. With --rows, every statistic is read from those
    query rows only (what the last token reads).
    ablation and dla (with --answer): how much the metric drops without each
    head (its output replaced as --ablation says) and what the head writes to the
    answer's logit (W_U[answer] - W_U[versus] with --versus); sorted by ablation.
    patch (with --corrupt): how much of the metric comes back when the head's
    clean output is put into the run on the corrupted text.
    kind (in data; where layers differ): global or sliding N attention.
    """
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.heads import HeadTable

    asked = source.request(shared, statistics=True)
    shared.effects.check(source.model, sort, saved=source.saved is not None)
    shown = _rows_shown(top, output_format, shared.environment)
    _predictions_checked(predictions, shared.effects, output_format)

    read = partial(_read, asked, shared.environment, shared.effects)
    statistics = partial(_read_product, read, "statistics")
    picture_format = _picture_checked(picture, shared.effects, shared.picture)
    if shared.effects.knockout is not None:
        knock = partial(_read_product, read, "knockout")
        found = source.read(shared, knock)
        if picture is not None:
            found.save(picture, **shared.picture.figure())
        knocked = None if top is None else shown  # a row per layer: every one unless asked
        _write_knockout(found, output_format, sort, reverse, knocked, shared.environment)
        return
    probe = None
    if detect is None:
        several = "attnviz stats gives these statistics over many inputs"
        table = source.read(shared, statistics, several, HeadTable.of)
    else:
        out.check_probe(detect, source.text, source.target, source.pair, source.saved)
        refuse_unused(shared.effects.given(), "a text's next token", "the detectors' probe")
        probe = asked.open(shared.environment).detection_probe()
        table = statistics(probe)
    if shared.effects.normalize and table.effects is not None:
        table = table.with_effects(table.effects.normalized())
    sort = sort or _default_sort(detect, shared.effects)
    if picture is not None and picture_format is not None:
        _draw(table, sort, picture, picture_format, shared.picture.style())
    listed = _Listed(sort, reverse, shown, top is None, detect, probe, predictions)
    _write_statistics(table, listed, output_format, shared.environment)


@dataclass(frozen=True)
class _Listed:
    """Which rows of a heads table are listed, in what order, and beside what."""

    sort: HeadColumn
    reverse: bool
    shown: int | None
    top_by_default: bool  # no --top: the rows past the first ones are said to be there
    detect: Detector | None
    probe: str | None
    predictions: int | None


def _write_statistics(
    table: HeadTable, listed: _Listed, output_format: Output, environment: Environment
) -> None:
    """The table's rows, sorted and cut as ``listed`` says, as data or a terminal table."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.heads import as_dicts, sort_rows

    ranked = sort_rows(table.rows, listed.sort, listed.reverse)
    rows = ranked[: listed.shown]
    columns = _columns(table, output_format, listed.detect, listed.sort)
    if output_format is not Output.TABLE:
        fields = _data_fields(table, listed.probe, listed.predictions)
        names = [column.value for column in columns]
        write_table(output_format, as_dicts(rows, columns), names, d.STDIO, fields)
        return
    probed = listed.detect is not None
    drawn = _table(table, rows, columns, probed=probed, predictions=listed.predictions)
    console = stdout_console(d.ColourChoice.AUTO, None, environment)
    console.print(drawn)
    if len(ranked) > len(rows) and listed.top_by_default:
        console.print(f"… {len(ranked) - len(rows)} more heads: --top all lists every one")


# Each statistic's line of the help, from its declaration (a new one is listed by itself).
heads.__doc__ = (heads.__doc__ or "").format(
    statistics=" ".join(
        f"{column}{' (with --span)' if column.needs is Needs.SPAN else ''}: {column.help}."
        for column in HeadColumn
        if column.per is not None and not column.detector
    )
)


def _data_fields(table: HeadTable, probe: str | None, predictions: int | None) -> dict[str, object]:
    """What a heads file records beside its rows: the probe, the answer, its next tokens."""
    fields: dict[str, object] = {} if probe is None else {"probe": probe}
    if table.effects is not None:
        fields |= table.effects.fields()
    if table.effects is not None and predictions is not None:
        listed = table.effects.on.predictions[:predictions]
        fields["predictions"] = [{"token": t, "probability": p} for t, p in listed]
    return fields


def _rows_shown(top: str | None, output_format: Output, environment: Environment) -> int | None:
    """How many rows to list (None: all): --top N, or all; without it, a terminal's table
    the first :data:`TERMINAL_ROWS` (270 rows scroll what matters away), data every row."""
    if top is None:
        terminal = output_format is Output.TABLE and environment.stdout_is_terminal
        return TERMINAL_ROWS if terminal else None
    if top.strip().lower() == "all":
        return None
    try:
        count = int(top)
    except ValueError:
        count = 0
    if count < 1:
        raise UsageError(f"--top takes a number of rows, at least 1, or all, not {top!r}")
    return count


def _predictions_checked(count: int | None, effects: Effects, output_format: Output) -> None:
    if count is None:
        return
    if effects.answer is None or effects.knockout is not None:
        raise UsageError(
            "--predictions lists the next tokens an answer is read among: give --answer"
        )
    if output_format not in (Output.TABLE, Output.JSON):
        raise UsageError(
            f"--predictions lists tokens beside the heads: {output_format} holds heads alone "
            "(use json)"
        )


def _picture_checked(
    picture: str | None, effects: Effects, style: PictureSettings
) -> Output | None:
    """The picture's format, checked (and its file writable) before a model loads."""
    if picture is None:
        refuse_unused(style.given(), "the picture (--picture FILE)", "a table")
        return None
    style.style()
    if effects.answer is None:
        raise UsageError("--picture draws each head's effect on an answer: give --answer")
    drawn = output_of_file(picture, PICTURES)
    check_writable(picture)
    return drawn


def _draw(
    table: HeadTable, sort: HeadColumn, picture: str, picture_format: Output, style: Style
) -> None:
    """The layers × heads grid of the sorted effect (else patch, else ablation)."""
    from attnviz.render.effects import effects_picture  # matplotlib: only for a picture

    effects = table.effects
    assert effects is not None
    column = sort.value if sort.needs in (Needs.ANSWER, Needs.CORRUPT) else None
    column = column or effects.drawn_column()
    with open_output(picture, binary=True) as stream:
        stream.write(effects_picture(effects, column, table.model, picture_format, style))


def _read(job: Job, environment: Environment, effects: Effects, line: str) -> Result:
    """What the job's request reads of one text (a knockout's span said as it was split)."""
    try:
        return job.run(job.open(environment), line, environment)
    except UsageError as error:
        raise effects.knocked_error(error) from None


def _read_product(read: Callable[[str], Result], product: str, line: str) -> Any:
    """One product of what ``read`` reads of a text: the statistics or the knockout."""
    return asked_for(getattr(read(line), product))


def _write_knockout(
    found: Knockout,
    output_format: Output,
    sort: HeadColumn | None,
    reverse: bool,
    top: int | None,
    environment: Environment,
) -> None:
    """A row per window of layers, the largest drop first (or in layer order)."""
    if sort not in (None, HeadColumn.LAYER):
        raise UsageError(f"--sort {sort} sorts heads; a knockout lists layers: --sort layer")
    records = found.records()
    if sort is None:
        records.sort(key=lambda record: record["knockout"])  # type: ignore[arg-type,return-value]
    records = (records[::-1] if reverse else records)[:top]
    if output_format is not Output.TABLE:
        names = ["layer", "first", "last", "knockout"]
        write_table(output_format, records, names, d.STDIO, found.fields(), "layers")
        return
    from rich.console import Group
    from rich.text import Text

    # numpy: after the options are checked (a usage error loads none)

    blocked = f"rows {index_span(found.rows)} may not read keys {index_span(found.span)}"
    title = (
        f"answer {display_label(repr(found.answer_token))} · log-probability "
        f"{number(found.log_prob)} · {blocked}, {found.window} layer(s) around each"
    )
    drawn = out.rows_table(
        caption="knockout: change in the answer's log-probability (nats) with the block in "
        "layers first to last"
    )
    for name in ("layer", "first", "last", "knockout"):
        drawn.add_column(name, justify="right")
    for record in records:
        drawn.add_row(*(number(value) if isinstance(value, float) else str(value)
                        for value in record.values()))  # fmt: skip
    stdout_console(d.ColourChoice.AUTO, None, environment).print(Group(Text(title), drawn))


def _default_sort(detect: Detector | None, effects: Effects) -> HeadColumn:
    """The detector's score, the heads the answer needs most, or the heads in order."""
    if detect is not None:
        return HeadColumn(detect.value)
    if effects.answer is None:
        return HeadColumn.LAYER
    if effects.ablate is Ablation.NONE:  # no ablation sweep: what was asked
        return HeadColumn.DLA if effects.corrupt is None else HeadColumn.PATCH
    return HeadColumn.ABLATION


def _columns(
    table: HeadTable, output_format: Output, detect: Detector | None, sort: HeadColumn
) -> list[HeadColumn]:
    """Data holds every column; the table, the statistics', the detectors' (with
    --detect, or sorted by a detector's score) or the effects' (with --answer), so that
    it fits 80 characters, and the column it is sorted by."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.heads import (
        DETECTOR_COLUMNS,
        DETECTORS_TABLE,
        EFFECTS_TABLE,
        STATISTICS_TABLE,
    )

    if output_format is not Output.TABLE:
        return table.columns()
    if detect is not None or sort in DETECTOR_COLUMNS:
        return table.columns(DETECTORS_TABLE)
    if table.effects is not None:
        return table.columns(EFFECTS_TABLE | {sort})
    return table.columns(STATISTICS_TABLE | {sort})


def _table(
    table: HeadTable,
    rows: list[HeadStatistics],
    columns: list[HeadColumn],
    probed: bool,
    predictions: int | None = None,
) -> Group:
    """The rows as a rich table under a line saying what was read (a line of its own: a
    narrow table would wrap it), its caption saying what the columns mean."""
    from rich.console import Group
    from rich.text import Text

    # numpy: after the options are checked (a usage error loads none)

    read = "" if table.query_positions is None else f" · rows {index_span(table.query_positions)}"
    if probed:
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.extractor import PROBE_LENGTH

        read += f" · the detectors' probe: {PROBE_LENGTH} random tokens, repeated"
    title = f"{display_label(table.model)} · {table.mode} attention · {table.key_count} key tokens"
    if table.effects is not None:
        title += "\n" + _answer_line(table.effects)
    title += read
    if table.effects is not None and predictions is not None:
        listed = table.effects.on.predictions[:predictions]
        said = " · ".join(f"{display_label(repr(t))} {p:.3g}" for t, p in listed)
        title += f"\nthe model's next tokens: {said}"
    drawn = out.rows_table(
        caption=" · ".join(f"{column}: {column.help}" for column in columns if column.help),
    )
    for column in columns:
        drawn.add_column(
            out.column_header(column), justify="left" if column is HeadColumn.TOP_KEY else "right"
        )
    for row in rows:
        drawn.add_row(*(_cell(row[column], column) for column in columns))
    kinds = _kinds_line(table.rows)
    return Group(Text(title + (f"\n{kinds}" if kinds else "")), drawn)


def _answer_line(effects: HeadEffects) -> str:
    """What the effects were measured on: the answer, the metric, the corrupted run."""
    on = effects.on
    line = f"answer {display_label(repr(on.answer_token))} · log-probability {number(on.log_prob)}"
    if on.rank is not None:
        line += f" (probability {on.probability:.3g}, the model's number {on.rank:,})"
    if on.versus_token is not None and on.clean_metric is not None:
        versus = display_label(repr(on.versus_token))
        line += f" · vs {versus}: logit difference {number(on.clean_metric)}"
    line += f" · ablation: {effects.ablate.value}"
    if on.corrupt is not None and on.corrupt_metric is not None:
        line += (
            f"\ncorrupted: {display_label(repr(on.corrupt))} · metric {number(on.corrupt_metric)}"
        )
    if on.normalized:
        line += " · patch: the fraction of the corruption's change brought back"
    if on.method.value == "gradient":
        line += " · gradient estimates"
    return line


def _kinds_line(rows: list[HeadStatistics]) -> str:
    """Which layers are of which kind, in words ("" where all are global): the most
    common kind is "the others"."""
    # numpy: after the options are checked (a usage error loads none)

    layers: dict[str, list[int]] = {}
    for row in rows:
        if row.kind is not None and row.layer not in layers.get(row.kind, []):
            layers.setdefault(row.kind, []).append(row.layer)
    if not layers:
        return ""
    *named, (common, _) = sorted(layers.items(), key=lambda item: len(item[1]))
    if not named:
        return f"every layer {common}"
    listed = "; ".join(f"{kind}: layer{'s' * (len(held) > 1)} {index_span(held)}"
                       for kind, held in named)  # fmt: skip
    return f"{listed}; the others {common}"


def _cell(value: object, column: HeadColumn) -> str:
    if column is HeadColumn.TOP_KEY:
        return spaces_shown(str(value))
    if isinstance(value, float):
        return number(value)
    return "–" if value is None else str(value)
