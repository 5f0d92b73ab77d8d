"""`attnviz batch`: pictures and data for every line of a file, with a manifest."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.choices import Engine, Output, View
from attnviz.cli import declarations as d
from attnviz.cli.engine import engine_settings
from attnviz.cli.environment import Environment
from attnviz.cli.option_kinds import output_option
from attnviz.cli.output import top_heads_for
from attnviz.cli.pictures import HeadChoice, PictureSettings, head_choice, picture_settings
from attnviz.cli.settings import (
    DEFAULT_READING,
    Reading,
    map_products,
    model_settings,
    reading_options,
)
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError
from attnviz.head_columns import HeadColumn, Needs
from attnviz.outputs import BATCH, DATA, describe, formats_named, refuse_inapplicable, refuse_unused
from attnviz.safe_text import display_label

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from attnviz import engines
    from attnviz.batch import Batch, Tally
    from attnviz.cli.settings import Job

# What batch writes for every input: pictures, its maps as data, or the page.
BatchFormat = d.some_of("BatchFormat", *BATCH)


SourceArgument = Annotated[
    str,
    typer.Argument(
        metavar="INPUT",
        help="A text file (a sentence per line), a JSONL file (objects with text and "
        "optional target and id), or - for stdin.",
    ),
]
FolderOption = output_option("The folder to write into (created if needed).", kind=Path)
FormatsOption = d.format_option(
    list[BatchFormat] | None,
    f"{formats_named(BATCH)}; repeat for several. Default: png.",
)
ResumeOption = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Finish an earlier batch in this folder: skip the inputs its manifest records "
        "as done for the same request, files intact; redo the rest.",
    ),
]
OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Start again in a folder that holds an earlier batch: the files its "
        "manifests record are removed first.",
    ),
]
JobsOption = Annotated[
    int,
    typer.Option(
        "--jobs",
        "-j",
        metavar="N",
        min=1,
        max=64,
        help="Worker processes for rendering; with --engine ray, Ray workers, each holding "
        "the model.",
    ),
]
ShardOption = Annotated[
    str | None,
    typer.Option(
        "--shard",
        metavar="K/N",
        help="K/N: process only the K-th of N interleaved slices of the input (input i "
        "belongs to slice i mod N + 1); the manifest is then manifest-K-of-N.jsonl.",
    ),
]
BatchSizeOption = Annotated[
    int,
    typer.Option(
        "--batch-size", metavar="N", min=1, max=1024, help="Inputs per forward pass of a model."
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress, no summary.")]


@sharing(engine_settings, head_choice, picture_settings, map_products, model_settings)
@reading_options
def batch(
    source: SourceArgument,
    output: FolderOption,
    formats: FormatsOption = None,
    view: d.ViewOption = View.HEAD,
    resume: ResumeOption = False,
    overwrite: OverwriteOption = False,
    jobs: JobsOption = 1,
    shard: ShardOption = None,
    batch_size: BatchSizeOption = 16,
    quiet: QuietOption = False,
    reading: Reading = DEFAULT_READING,
    aggregate: d.AggregateOption = None,
    label_positions: d.LabelPositionsOption = False,
    dtype: d.DtypeOption = d.Dtype.FLOAT32,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Write pictures and data for every input, and a manifest of what was written.

    Files are named by the input's position and a slug of its text (or its id),
    e.g. 0003-the-man-walked-the-dog-L0-H1.png, and appear only when complete.
    manifest.jsonl has a line per input: its files, or the error that stopped
    it. A failing input does not stop the batch: the exit code is then 3.
    """
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.batch import Batch, Outputs
    from attnviz.batch.inputs import parse_shard

    formats = tuple(dict.fromkeys(formats or [Output.PNG]))
    shared.run_on.check()
    _check_applicable(
        formats,
        view,
        shared.run_on.engine,
        jobs,
        shared.picture,
        shared.choice,
        label_positions,
        dtype,
    )
    if resume and overwrite:
        raise UsageError("--resume finishes an earlier batch, --overwrite starts again: pick one")
    asked = shared.request(
        reading,
        aggregate=aggregate,
    )
    # Answers come with the inputs (JSONL "answer"): a ranking by an effect reads each one's.
    by_effect = shared.choice.by is not None and HeadColumn(shared.choice.by).needs is Needs.ANSWER
    top = top_heads_for(shared.choice, aggregate, answered=by_effect)
    shared.products.ranking(top)
    outputs = Outputs(
        folder=output,
        formats=formats,
        view=view,
        style=shared.picture.style(),
        top=top,
        label_positions=label_positions,
        aggregate=aggregate,
        dtype=dtype,
        request=asked.fingerprint(),
    )
    shard_of = parse_shard(shard) if shard else None
    job = Batch.prepare(source, outputs, shard=shard_of, resume=resume, overwrite=overwrite)
    _run(job, asked, shared.run_on.open(jobs, shared.environment), batch_size, quiet, shared)


def _run(
    job: Batch, asked: Job, engine: engines.Engine, batch_size: int, quiet: bool, shared: Shared
) -> None:
    """The batch run on ``engine``, its progress shown unless ``quiet`` and its summary
    said when it ends (stopped or not)."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.batch import Tally

    started = time.monotonic()
    tally = Tally()
    try:
        with ProgressReport(quiet, shared.environment) as report:
            job.run(engine, asked.spec, asked.request, batch_size=batch_size, progress=report,
                    tally=tally)  # fmt: skip
    finally:  # after the progress bar is gone, so that the summary stays on screen
        if not quiet and tally.started:
            _summary(job, tally, time.monotonic() - started)


def _check_applicable(
    formats: tuple[Output, ...],
    view: View,
    engine: Engine,
    jobs: int,
    picture: PictureSettings,
    choice: HeadChoice,
    label_positions: bool,
    dtype: d.Dtype,
) -> None:
    """Options that would do nothing for these formats are refused, not dropped."""
    if engine is Engine.LOCAL and jobs != 1 and set(formats) <= set(DATA):
        refuse_unused(
            ["--jobs"],
            "pictures and pages (drawn in worker processes) or --engine ray",
            describe(formats),
            "leave it out: data is written as the model reads",
        )
    given = [*picture.given(), *choice.given()]
    given += ["--label-positions"] if label_positions else []
    given += [f"--dtype {dtype.value}"] if dtype is not d.Dtype.FLOAT32 else []
    refuse_inapplicable(given, formats, view)


def _summary(job: Batch, tally: Tally, elapsed: float) -> None:
    inputs, blank_lines, output = job.inputs, job.blank_lines, job.outputs.folder
    written = len(tally.records) - tally.failed
    not_reached = len(inputs) - len(tally.records) - tally.skipped
    parts = [f"{written} written"]
    if tally.failed:
        parts.append(f"{tally.failed} failed")
    if tally.skipped:
        parts.append(f"{tally.skipped} skipped (already done)")
    if not_reached:
        parts.append(f"{not_reached} not reached")
    if blank_lines:
        parts.append(f"{blank_lines} blank line{'s' if blank_lines > 1 else ''} skipped")
    print(
        f"attnviz: {len(inputs)} inputs: {', '.join(parts)}; {display_label(str(output))} in "
        f"{elapsed:.1f} s",
        file=sys.stderr,
    )


class ProgressReport:
    """A rich progress bar when stderr is a terminal, a line every few seconds when not."""

    def __init__(self, quiet: bool, environment: Environment) -> None:
        self.quiet = quiet
        self.environment = environment
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.last = 0.0

    def __enter__(self) -> Callable[[int, int], None]:
        from rich.console import Console

        if not self.quiet and self.environment.stderr_is_terminal:
            console = Console(stderr=True, markup=False, highlight=False, force_terminal=True)
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text

            class RateColumn(ProgressColumn):
                def render(self, task):
                    return Text(f"{task.speed:.1f} inputs/s" if task.speed else "")

            self.bar = Progress(
                TextColumn("inputs"),
                BarColumn(),
                MofNCompleteColumn(),
                RateColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("batch", total=None)
        return self.report

    def report(self, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=done, total=total)
            return
        now = time.monotonic()
        if done and (done == total or now - self.last >= 5):
            self.last = now
            print(f"attnviz: {done}/{total} inputs", file=sys.stderr)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
