"""`attnviz stats`: per-head statistics over a whole corpus, in bounded memory."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.atomic_files import open_output
from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.engine import JobsOption, engine_settings
from attnviz.cli.environment import Environment, stdout_console
from attnviz.cli.option_kinds import output_option, picture_option
from attnviz.cli.settings import (
    DEFAULT_READING,
    Reading,
    model_settings,
    reading_options,
    row_products,
)
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError, warn
from attnviz.inputs import Input
from attnviz.outputs import TABLE_DATA, formats_named, suffixes_of
from attnviz.safe_text import display_label
from attnviz.writers import write_table

if TYPE_CHECKING:
    from rich.table import Table

    from attnviz.analysis.corpus import CorpusStatistics, Line

PROGRESS_SECONDS = 5  # between progress lines on stderr


FormatOption = d.format_option(
    d.TableFormat,
    f"table: corpus means per head. {formats_named(TABLE_DATA)}: a row per (layer, head, "
    "statistic) with count, mean, std and the 5th, 50th and 95th percentiles (exact, "
    "interpolated as numpy's percentile, up to 100 inputs; past that within 1%).",
)


SourceArgument = Annotated[
    str,
    typer.Argument(
        metavar="INPUT",
        help="A text file (a sentence per line), a JSONL file (objects with text and "
        "optional target and answer: each head's ablation and dla on it, summed over the "
        "inputs that have one; with versus, the logit difference; with corrupt, the "
        "corrupted twin, each head's patch too), or - for stdin: as batch reads them.",
    ),
]
LimitOption = Annotated[
    int | None, typer.Option("--limit", metavar="N", min=1, help="Only the first N inputs.")
]
BatchSizeOption = Annotated[
    int,
    typer.Option("--batch-size", metavar="N", min=1, max=1024, help="Inputs per forward pass."),
]
OutputOption = output_option(
    "Write the statistics to PATH instead of stdout, whole or not at all; "
    f"{suffixes_of(TABLE_DATA)} picks the format."
)
PictureOption = picture_option(
    "Also draw a layers × heads heatmap of each statistic's corpus mean (.png, .svg or .pdf)."
)
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress.")]


@sharing(engine_settings, row_products, model_settings)
@reading_options
def stats(
    source: SourceArgument,
    reading: Reading = DEFAULT_READING,
    limit: LimitOption = None,
    batch_size: BatchSizeOption = 16,
    jobs: JobsOption = None,
    output_format: FormatOption = Output.TABLE,
    output: OutputOption = None,
    picture: PictureOption = None,
    quiet: QuietOption = False,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Per-head statistics over a whole corpus: every statistic `heads` computes for
    one input, and the position of the top key.

    Inputs stream through; memory holds a running mean and variance and a
    quantile sketch (1% relative accuracy) per head and statistic, whatever the
    corpus size. Blank lines, lines that cannot be read and inputs the model
    cannot read (an empty sentence B, a target an encoder has no use for) are
    skipped and counted; a warning says why the first of them was skipped.

    With --rows, every statistic is read from each input's own rows (--rows
    last: what every input's last token reads); --span adds the span statistic,
    each head's weight on those keys, a retrieval score over the corpus.
    """
    from itertools import islice

    shared.run_on.check(jobs)
    output_format, drawn = out.results_destinations(output, output_format, picture)
    asked = shared.request(reading)
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.corpus import CorpusWork

    engine = shared.run_on.open(jobs or 2, shared.environment)
    skipped = Skipped()
    started = time.monotonic()
    with engine.session():  # left before the statistics are written
        lines = islice(skipped.readable(source), limit)
        progress = _progress_lines(quiet)
        corpus = engine.statistics(
            CorpusWork(lines, asked.spec, asked.request, batch_size, progress)
        )
    skipped.add_failed(corpus)
    skipped.report(source, corpus.inputs, quiet, time.monotonic() - started)
    _write(corpus, output_format, shared.environment, destination=output or "-")
    if drawn is not None:
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.render.statistics import statistics_picture

        with open_output(str(picture), binary=True) as stream:
            stream.write(statistics_picture(corpus, drawn))


@dataclass
class Skipped:
    """The lines left out: blank ones, and those that could not be read (by attnviz or
    by the model), with why the first of them could not."""

    blank: int = 0
    unreadable: int = 0
    first_error: str = ""

    def readable(self, source: str) -> Iterator[Line]:
        """(line number, input) of every readable input of ``source``, counting the
        rest."""
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.batch.inputs import iter_inputs

        for item in iter_inputs(source):
            if item.blank:
                self.blank += 1
                continue
            error = item.error
            if error is None:
                try:
                    text, target, pair = item.item
                    given = Input(text, target, pair, item.answer, item.versus, item.corrupt)
                except UsageError as refused:
                    error = f"line {item.line}: {refused}"
            if error is not None:
                self.unreadable += 1
                self.first_error = self.first_error or str(error)
            else:
                yield item.line, given

    def add_failed(self, corpus: CorpusStatistics) -> None:
        """Count in the inputs the model could not read."""
        self.unreadable += corpus.failed
        self.first_error = self.first_error or corpus.first_failure

    def report(self, source: str, inputs: int, quiet: bool, elapsed: float) -> None:
        """No input at all is a usage error; anything unreadable a warning; and, unless
        ``quiet``, a line of what was read and skipped."""
        more = self.unreadable - 1
        why = self.first_error + (f" (and {more} more line{'s' * (more > 1)})" if more > 0 else "")
        if not inputs:
            detail = f": {why}" if self.unreadable else ""
            raise UsageError(f"{source} holds no input to compute statistics over{detail}")
        if self.unreadable:
            warn(f"skipped what could not be read: {why}")
        if not quiet:
            notes = (
                [f"{self.blank} blank line{'s' * (self.blank > 1)} skipped"] if self.blank else []
            )
            if self.unreadable:
                notes.append(f"{self.unreadable} unreadable skipped")
            note = "".join(f", {text}" for text in notes)
            print(f"attnviz: {inputs} inputs{note} in {elapsed:.1f} s", file=sys.stderr)


def _progress_lines(quiet: bool) -> Callable[[int], None]:
    """A progress callback printing how many inputs are counted, every few seconds."""
    last = time.monotonic()

    def progress(inputs: int) -> None:
        nonlocal last
        now = time.monotonic()
        if not quiet and now - last >= PROGRESS_SECONDS:
            last = now
            print(f"attnviz: {inputs} inputs", file=sys.stderr)

    return progress


def _write(
    corpus: CorpusStatistics, output_format: Output, environment: Environment, destination: str
) -> None:
    rows = corpus.rows()
    by_kind = corpus.kind_rows()
    if output_format is not Output.TABLE:
        fields: dict[str, object] = {"model": corpus.model, "inputs": corpus.inputs}
        if by_kind:  # json only: csv's rows say each head's kind
            fields["kinds"] = by_kind
        write_table(output_format, rows, list(rows[0]), destination, fields)
        return
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.analysis.heads import DETECTOR_COLUMNS

    console = stdout_console(d.ColourChoice.AUTO, None, environment)
    keyed = {(row["layer"], row["head"], row["statistic"]): row for row in rows}
    heads = sorted({(row["layer"], row["head"]) for row in rows})
    # A line of its own: a model's name is wider than a narrow table, whose title would
    # wrap it.
    title = f"{display_label(corpus.model)} · {corpus.inputs} inputs · corpus means"
    console.print(title, markup=False, highlight=False, soft_wrap=True)
    # The statistics, then the detectors' scores, as heads shows them: each table fits
    # 80 columns; "± std" where the width has room for it.
    held = corpus.statistics()
    statistics = [name for name in held if name not in DETECTOR_COLUMNS]
    detectors = [name for name in held if name in DETECTOR_COLUMNS]
    for number, names in enumerate((statistics, detectors)):
        if not names:
            continue
        with_std = console.width >= _LABEL_COLUMNS + len(names) * _WITH_STD
        table = _statistics_table(keyed, heads, names, with_std)
        table.title = "detector scores" if number else None
        if not with_std:
            table.caption = "± std, percentiles: widen the terminal, or -f json or -f csv"
        console.print(table)
    if by_kind:
        console.print(_kinds_table(by_kind, statistics, console.width))


def _kinds_table(by_kind: list[dict], names: Sequence[str], width: int) -> Table:
    """A row per layer kind (global, sliding N), a column per statistic in ``names``:
    the mean over every head of those layers and every input."""
    keyed = {(row["kind"], row["statistic"]): row for row in by_kind}
    kinds = list(dict.fromkeys(row["kind"] for row in by_kind))
    with_std = width >= _LABEL_COLUMNS + len(names) * _WITH_STD
    table = out.rows_table(title="per layer kind: every head of those layers")
    table.add_column("kind")
    for name in names:
        table.add_column(out.column_header(name), justify="right")
    for kind in kinds:
        summaries = [keyed.get((kind, name)) for name in names]
        table.add_row(kind, *_mean_cells(summaries, with_std))
    return table


_LABEL_COLUMNS = 14  # characters the layer and head columns take
_WITH_STD = 15  # characters a column of "0.123 ± 0.045" takes


def _statistics_table(
    keyed: dict[tuple[int, int, str], dict], heads: list, names: Sequence[str], with_std: bool
) -> Table:
    """A row per (layer, head), a column per statistic in ``names``: the corpus mean,
    and its standard deviation if ``with_std``."""
    table = out.rows_table()
    table.add_column("layer", justify="right")
    table.add_column("head", justify="right")
    for name in names:
        table.add_column(out.column_header(name), justify="right")
    for layer, head in heads:
        summaries = [keyed.get((layer, head, name)) for name in names]
        table.add_row(str(layer), str(head), *_mean_cells(summaries, with_std))
    return table


def _mean_cells(summaries: list[dict | None], with_std: bool) -> list[str]:
    """Each summary's mean, and its standard deviation if ``with_std`` ("–" for none)."""
    cells = []
    for row in summaries:
        spread = f" ± {out.number(row['std'])}" if with_std and row is not None else ""
        cells.append("–" if row is None else f"{out.number(row['mean'])}{spread}")
    return cells
