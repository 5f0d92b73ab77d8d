"""`attnviz trace`: how much of the answer each layer × position brings back when the
clean run's activation is put into the run on a corrupted text (causal tracing)."""

from __future__ import annotations

from typing import Annotated

import typer

from attnviz.atomic_files import check_writable
from attnviz.choices import SITE_LABELS, Output, Site
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.answer_settings import trace_options
from attnviz.cli.option_kinds import picture_option
from attnviz.cli.pictures import figure_settings
from attnviz.cli.settings import DEFAULT_READING, Reading, layer_reading, trace_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.outputs import PICTURES, formats_named
from attnviz.request import asked_for

FormatOption = d.format_option(d.TableFormat, f"{formats_named(d.TABLES)}.")
SiteOption = d.choice_option(
    Site, "--site", "Where the clean activation is restored in each layer", SITE_LABELS
)
ByPositionOption = Annotated[
    bool,
    typer.Option(
        "--by-position",
        help="At a head's site (q, k, v, z, pattern), restore a head at one position at a "
        "time (a pattern: one query's row): "
        "a row per layer and head, a column per position (without it, a head at every "
        "position: a row per layer, a column per head).",
    ),
]
PictureOption = picture_option(
    "Draw the trace as a picture for a paper (.png, .svg or .pdf: the tokens the "
    "corrupted text changed marked *) or as an interactive page (.html: each cell's "
    "layer, token and effect on hover) instead.",
    "-o",
)


@sharing(trace_options, trace_settings, figure_settings)
@layer_reading
def trace(
    text: d.TextArgument,
    reading: Reading = DEFAULT_READING,
    site: SiteOption = Site.RESID,
    by_position: ByPositionOption = False,
    output_format: FormatOption = Output.TABLE,
    output: PictureOption = None,
    width: d.WidthOption = None,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Causal tracing: for every layer and position, how much of the answer comes back
    when the clean run's activation there is put into the run on the corrupted text.

    effect = metric(corrupted run, clean activation restored at layer, position) -
    metric(corrupted run); the metric is the answer's log-probability, or with
    --versus logit(answer) - logit(versus). TEXT and --corrupt have as many tokens.
    At a head's site (q, k, v, z, pattern) a head is restored at every position (or, with
    --by-position, at one position at a time).
    --method gradient estimates every cell from one backward pass (any length).
    """
    drawn = out.picture_or_data(
        output, output_format, shared.picture.given(), (*PICTURES, Output.HTML)
    )
    style = shared.picture.style()
    asked = shared.request(reading, text=text, trace=site, by_position=by_position)
    shared.effects.check(reading.model)
    if output is not None:
        check_writable(output)  # before the model loads
    extractor = asked.open(shared.environment)
    line = out.only_one(out.inputs(text, extractor), "trace reads one text and its corrupted twin")
    found = asked_for(asked.run(extractor, line, shared.environment).trace)
    if shared.effects.normalize:
        found = found.normalized()

    def picture() -> bytes:
        if drawn is Output.HTML:
            from attnviz.render.page import trace_page_html  # numpy: only for the page

            return trace_page_html(found).encode("utf-8")
        from attnviz.render.effects import trace_picture  # matplotlib: only for a picture

        assert drawn is not None
        return trace_picture(found, drawn, style)

    def table(columns: int) -> object:
        from attnviz.render.effects import trace_table  # numpy and rich's drawing

        return trace_table(found, columns)

    out.write_drawn(found, drawn, output, output_format, picture, table, width, shared.environment)
