"""`attnviz stats`: per-head statistics over a whole corpus, in bounded memory."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli.output import NO_TERMINAL, Environment, with_environment
from attnviz.cli.settings import DEFAULT_SETTINGS, ModelSettings, model_settings
from attnviz.outputs import PICTURES, output_for, output_of_file

PROGRESS_SECONDS = 5  # between progress lines on stderr


FormatOption = d.format_option(
    d.TableFormat,
    "table: corpus means per head. json, csv: a row per (layer, head, "
    "statistic) with count, mean, std and the 5th, 50th and 95th percentiles.",
)


@model_settings
@with_environment
def stats(
    source: Annotated[
        str,
        typer.Argument(
            metavar="INPUT",
            help="A text file (a sentence per line), a JSONL file (objects with text and "
            "optional target), or - for stdin: as batch reads them.",
        ),
    ],
    mode: d.ModeOption = None,
    model: d.ModelOption = d.BUILTIN,
    layer: d.LayerOption = "all",
    head: d.HeadOption = "all",
    limit: Annotated[
        int | None,
        typer.Option("--limit", metavar="N", min=1, help="Only the first N inputs."),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option("--batch-size", metavar="N", min=1, max=1024, help="Inputs per forward pass."),
    ] = 16,
    engine: d.EngineOption = d.Engine.LOCAL,
    ray_address: d.RayAddressOption = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            metavar="N",
            min=1,
            max=1024,
            show_default="2",
            help="With --engine ray: Ray workers, each holding the model.",
        ),
    ] = None,
    cpus_per_worker: d.CpusPerWorkerOption = 1,
    gpus_per_worker: d.GpusPerWorkerOption = 0.0,
    output_format: FormatOption = Output.TABLE,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="Write the statistics to PATH instead of stdout, whole or not at all; .json "
            "or .csv picks the format.",
        ),
    ] = None,
    picture: Annotated[
        str | None,
        typer.Option(
            "--picture",
            metavar="PATH",
            help="Also draw a layers × heads heatmap of each statistic's corpus mean "
            "(.png, .svg or .pdf).",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress.")] = False,
    environment: Environment = NO_TERMINAL,
    settings: ModelSettings = DEFAULT_SETTINGS,
) -> None:
    """Per-head statistics over a whole corpus: entropy, distance, sink, previous, self
    and the position of the top key, as `heads` computes them for one input.

    Inputs stream through; memory holds a running mean and variance and a
    quantile sketch (1% relative accuracy) per head and statistic, whatever the
    corpus size. Blank lines, lines that cannot be read and inputs the model
    cannot read (an empty sentence B, a target an encoder has no use for) are
    skipped and counted; a warning says why the first of them was skipped.
    """
    from attnviz.cli.settings import request
    from attnviz.io import check_writable

    d.check_engine(engine, ray_address, cpus_per_worker, gpus_per_worker, jobs)
    # A name that cannot be written is refused before any work, not after hours of it.
    if output is not None:
        output_format = _file_format(output, output_format)
        check_writable(output)
    chosen_picture = None
    if picture is not None:
        chosen_picture = output_of_file(picture, PICTURES)
        check_writable(picture)
    asked = request(model=model, mode=mode, layer=layer, head=head, settings=settings)
    if engine is d.Engine.LOCAL:
        extractor = asked.open(environment)
    from itertools import islice

    from attnviz.analysis.corpus import CorpusStatistics
    from attnviz.batch import iter_inputs

    blank = unreadable = 0
    first_error = ""  # why the first unreadable line could not be read

    def readable():
        nonlocal blank, unreadable, first_error
        for item in iter_inputs(source):
            if item.blank:
                blank += 1
            elif item.error is not None:
                unreadable += 1
                first_error = first_error or str(item.error)
            else:
                yield item.line, (item.text, item.target, item.pair)

    pairs = islice(readable(), limit)
    corpus = CorpusStatistics()
    started = last = time.monotonic()

    def progress(inputs: int) -> None:
        nonlocal last
        now = time.monotonic()
        if not quiet and now - last >= PROGRESS_SECONDS:
            last = now
            print(f"attnviz: {inputs} inputs", file=sys.stderr)

    if engine is d.Engine.RAY:
        from attnviz.distributed import Workers, corpus_statistics, ray_session

        with ray_session(ray_address):  # left before the statistics are written
            corpus = corpus_statistics(
                pairs,
                asked.spec,
                asked.request,
                batch_size=batch_size,
                workers=Workers(jobs or 2, cpus_per_worker, gpus_per_worker),
                progress=progress,
            )
        model_name = asked.spec.model
    else:
        model_name = extractor.name
        for inputs in corpus.add_corpus(extractor, pairs, asked.request, batch_size):
            progress(inputs)
    unreadable += corpus.failed
    first_error = first_error or corpus.first_failure
    more = unreadable - 1
    why = first_error + (f" (and {more} more line{'s' if more > 1 else ''})" if more > 0 else "")
    if not corpus.inputs:
        from attnviz.errors import UsageError

        detail = f": {why}" if unreadable else ""
        raise UsageError(f"{source} holds no input to compute statistics over{detail}")
    if unreadable:
        from attnviz.errors import warn

        warn(f"skipped what could not be read: {why}")
    if not quiet:
        elapsed = time.monotonic() - started
        notes = [f"{blank} blank line{'s' if blank > 1 else ''} skipped"] if blank else []
        if unreadable:
            notes.append(f"{unreadable} unreadable skipped")
        note = "".join(f", {text}" for text in notes)
        print(f"attnviz: {corpus.inputs} inputs{note} in {elapsed:.1f} s", file=sys.stderr)
    _write(corpus, output_format, environment, model=model_name, destination=output or "-")
    if chosen_picture is not None:
        from attnviz.io import open_output
        from attnviz.render.image import statistics_picture

        with open_output(picture, binary=True) as stream:
            stream.write(statistics_picture(corpus, chosen_picture, model_name))


def _file_format(output: str, asked: Output) -> Output:
    """The format of the statistics written to ``output``: its suffix's, json or csv."""
    from attnviz.errors import UsageError

    by_suffix = output_for(output)
    if by_suffix in PICTURES:
        raise UsageError(
            f"-o writes the statistics as data: draw the heatmaps with --picture {output}"
        )
    if by_suffix not in (Output.JSON, Output.CSV):
        if asked is Output.TABLE:
            raise UsageError(f"cannot tell the format of {output}: name it .json or .csv")
        return asked
    if asked is not Output.TABLE and asked is not by_suffix:
        raise UsageError(
            f"--format {asked.value} and the suffix of {output} ({by_suffix.value}) disagree: "
            "pick one"
        )
    return by_suffix


def _write(
    corpus, output_format: Output, environment: Environment, model: str, destination: str
) -> None:
    from attnviz.cli import output as out
    from attnviz.io import dump_json, write_text
    from attnviz.schema import envelope

    rows = corpus.rows()
    if output_format is Output.JSON:
        document = envelope({"model": model, "inputs": corpus.inputs, "heads": rows})
        write_text(dump_json(document), destination)
        return
    if output_format is Output.CSV:
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_text(buffer.getvalue(), destination)
        return
    from rich.table import Table

    from attnviz.analysis.corpus import STATISTICS
    from attnviz.tokens import display_label

    table = Table(
        title=f"{display_label(model)} · {corpus.inputs} inputs · corpus mean (± std) per head"
    )
    table.add_column("layer", justify="right")
    table.add_column("head", justify="right")
    for name in STATISTICS:
        table.add_column(name.replace("_", " "), justify="right")
    keyed = {(row["layer"], row["head"], row["statistic"]): row for row in rows}
    for layer, head in sorted({(row["layer"], row["head"]) for row in rows}):
        cells = []
        for name in STATISTICS:
            row = keyed.get((layer, head, name))
            cells.append("–" if row is None else f"{row['mean']:.3f} ± {row['std']:.3f}")
        table.add_row(str(layer), str(head), *cells)
    out.stdout_console(d.ColourChoice.AUTO, None, environment).print(table)
