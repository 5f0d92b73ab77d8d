"""`attnviz show`: every selected head as a labelled heatmap, or the maps as data."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz.cli import declarations as d
from attnviz.cli.output import NO_TERMINAL, Environment, with_environment
from attnviz.cli.pictures import ALL_HEADS, HeadChoice, head_choice
from attnviz.cli.settings import (
    DEFAULT_SETTINGS,
    NO_PRODUCTS,
    MapProducts,
    ModelSettings,
    map_products,
    model_settings,
)

if TYPE_CHECKING:
    from attnviz.analysis.heads import TopHeads
    from attnviz.choices import Aggregate, Detector, Dtype
    from attnviz.maps import AttentionMaps


class ShowFormat(StrEnum):
    AUTO = "auto"  # the suffix of -o; else a picture for a terminal, NDJSON for a pipe or file
    TERMINAL = "terminal"
    JSON = "json"
    NDJSON = "ndjson"
    NPZ = "npz"
    CSV = "csv"
    HTML = "html"  # the interactive page
    PNG = "png"  # the model view, as `export` draws it
    SVG = "svg"
    PDF = "pdf"


_PICTURES = (ShowFormat.PNG, ShowFormat.SVG, ShowFormat.PDF)
_STORED = (ShowFormat.JSON, ShowFormat.NDJSON, ShowFormat.NPZ)  # the maps' own documents
_SUFFIXES = {".jsonl": ShowFormat.NDJSON, **{f".{f.value}": f for f in ShowFormat}}


def _format_of(output: str) -> ShowFormat | None:
    """The format a file name says it holds (``maps.npz``: npz), if it says one."""
    if output == d.STDIO:
        return None
    found = _SUFFIXES.get(os.path.splitext(output)[1].lower())
    return None if found in (ShowFormat.AUTO, ShowFormat.TERMINAL) else found


FormatOption = Annotated[
    ShowFormat,
    typer.Option(
        "--format",
        "-f",
        metavar="FORMAT",
        case_sensitive=False,
        rich_help_panel=d.OUTPUT_PANEL,
        help="terminal: heatmaps. json: one AttentionMaps document. ndjson: one document per "
        "line, streamed. npz: numpy arrays. csv: a row per weight. html: the interactive page. "
        "png, svg, pdf: the model view as export draws it. auto: what the suffix of --output "
        "says, else terminal when stdout is a terminal (and no --output) or --view, --values, "
        "--top-heads or --label-positions asks for a picture, else ndjson.",
    ),
]
OutputOption = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        metavar="PATH",
        rich_help_panel=d.OUTPUT_PANEL,
        help="Where data formats go: a file (written whole or not at all), or - for stdout.",
    ),
]


@dataclass(frozen=True)
class Presentation:
    """How show (and generate) present maps: the output options, checked together before
    any model is loaded."""

    output_format: ShowFormat
    output: str
    dtype: Dtype
    colour: d.ColourChoice
    width: int | None
    values: bool
    terminal_view: d.TerminalView
    label_positions: bool
    aggregate: Aggregate | None
    top: TopHeads | None
    between: str | None = None

    @classmethod
    def checked(
        cls,
        *,
        output_format: ShowFormat,
        output: str,
        aggregate: Aggregate | None,
        choice: HeadChoice,
        terminal_view: d.TerminalView,
        label_positions: bool,
        values: bool,
        dtype: Dtype,
        colour: d.ColourChoice,
        width: int | None,
        environment: Environment,
        detect: Detector | None = None,
        **rest: object,
    ) -> Presentation:
        from attnviz.cli import output as out
        from attnviz.errors import UsageError
        from attnviz.io import check_writable

        by_suffix = _format_of(output)
        if output_format is ShowFormat.AUTO and by_suffix is not None:
            output_format = by_suffix  # -o maps.npz writes npz
        elif by_suffix is not None and by_suffix is not output_format:
            raise UsageError(
                f"--format {output_format.value} and the suffix of {output} ({by_suffix.value}) "
                "disagree: drop --format, or name the file for what it holds"
            )
        top = out.top_heads_for(choice, aggregate, detect)
        if output_format is ShowFormat.AUTO:  # a picture was asked for, even into a pipe
            picture = terminal_view is not d.TerminalView.AUTO or top is not None or values
            # A file is no terminal, whatever stdout is: one that its suffix names no
            # format of gets data.
            onto_terminal = environment.stdout_is_terminal and output == d.STDIO
            terminal = onto_terminal or picture or label_positions
            output_format = ShowFormat.TERMINAL if terminal else ShowFormat.NDJSON
        if output_format is ShowFormat.TERMINAL and output != d.STDIO:
            raise UsageError(
                "--output goes with a data --format; the terminal picture goes to stdout"
            )
        drawn_only = [f"--color {colour.value}"] if colour is not d.ColourChoice.AUTO else []
        drawn_only += ["--width"] if width is not None else []
        if output_format is not ShowFormat.TERMINAL:
            d.refuse_unused(drawn_only, "the terminal picture", f"{output_format.value} output")
        viewed = terminal_view is not d.TerminalView.AUTO
        for option, given in ((f"--view {terminal_view.value}", viewed), ("--values", values)):
            if given and output_format is not ShowFormat.TERMINAL:
                raise UsageError(
                    f"{option} is for the terminal picture, not {output_format.value} output"
                )
        if top is not None and output_format not in (ShowFormat.TERMINAL, *_PICTURES):
            raise UsageError(
                "--top-heads chooses heads to draw; data holds the selected layers × heads "
                "whole: pick them with --layer and --head (attnviz heads --sort ranks them)"
            )
        if dtype is not d.Dtype.FLOAT32 and output_format not in (*_STORED, ShowFormat.CSV):
            raise UsageError(
                f"--dtype {dtype.value} is for data (json, ndjson, npz, csv), not "
                f"{output_format.value} output"
            )
        if label_positions and output_format in _STORED:
            raise UsageError(
                f"--label-positions labels pictures and csv; {output_format.value} keeps the "
                "tokens as they are (a token's position is its index)"
            )
        check_writable(output)  # before a model loads, or a generation runs for minutes
        return cls(
            output_format=output_format,
            output=output,
            terminal_view=terminal_view,
            label_positions=label_positions,
            values=values,
            dtype=dtype,
            colour=colour,
            width=width,
            aggregate=aggregate,
            top=top,
            **rest,  # type: ignore[arg-type]
        )

    @property
    def is_terminal(self) -> bool:
        return self.output_format is ShowFormat.TERMINAL

    @property
    def drawn(self) -> bool:
        """A picture of the maps (the terminal's, a file's or the page), not their data."""
        return self.output_format in (ShowFormat.TERMINAL, ShowFormat.HTML, *_PICTURES)

    def present(self, stream: Iterable[AttentionMaps], environment: Environment) -> None:
        """Each input's maps, as they come: pictures to the terminal, data, or one picture."""
        from attnviz.analysis.aggregate import aggregate as combine
        from attnviz.choices import DataFormat
        from attnviz.cli import output as out
        from attnviz.cli.output import between_sentences
        from attnviz.io import write_maps

        if self.between is not None:
            stream = (between_sentences(maps, self.between) for maps in stream)
        if self.aggregate is not None:
            stream = (combine(maps, self.aggregate) for maps in stream)
        if self.label_positions:
            stream = (maps.with_positions() for maps in stream)
        if self.output_format is ShowFormat.HTML:
            from attnviz.choices import View

            out.save_page(out.only_one(stream), View.MODEL, self.output)
            return
        if self.output_format in _PICTURES:
            from attnviz.choices import PictureFormat, View
            from attnviz.render.image import Style

            picture = PictureFormat(self.output_format.value)
            maps = out.only_one(stream)
            out.save_picture(maps, View.MODEL, picture, Style(), self.output, self.top)
            return
        if self.output_format is not ShowFormat.TERMINAL:
            stream = (maps.astype(self.dtype) for maps in stream)
            write_maps(stream, DataFormat(self.output_format.value), self.output)
            return
        out.draw(
            stream,
            colour=self.colour,
            width=self.width,
            values=self.values,
            environment=environment,
            view=self.terminal_view,
            top=self.top,
        )


@model_settings
@map_products
@head_choice
@with_environment
def show(
    text: d.TextOrProbeArgument = None,
    detect: d.DetectOption = None,
    mode: d.ModeOption = None,
    target: d.TargetOption = None,
    model: d.ModelOption = d.BUILTIN,
    layer: d.LayerOption = "all",
    head: d.HeadOption = "all",
    aggregate: d.AggregateOption = None,
    values: d.ValuesOption = False,
    terminal_view: d.TerminalViewOption = d.TerminalView.AUTO,
    label_positions: d.LabelPositionsOption = False,
    pair: d.PairOption = None,
    between: d.BetweenOption = None,
    output_format: FormatOption = ShowFormat.AUTO,
    output: OutputOption = d.STDIO,
    dtype: d.DtypeOption = d.Dtype.FLOAT32,
    colour: d.ColourOption = d.ColourChoice.AUTO,
    width: d.WidthOption = None,
    environment: Environment = NO_TERMINAL,
    settings: ModelSettings = DEFAULT_SETTINGS,
    choice: HeadChoice = ALL_HEADS,
    products: MapProducts = NO_PRODUCTS,
) -> None:
    """Show what every attention head attends to: a heatmap per head.

    Rows are query tokens, columns key tokens; each row sums to 1. Panels sit
    side by side as the width allows. A wide input is drawn with narrower cells
    and, when even those do not fit, with neighbouring tokens pooled into one
    cell; the picture says so. When the panels would not fit the terminal's
    height, every head is drawn as a small thumbnail instead (--view grid), a
    whole model on one screen. With TEXT -, every line of stdin is one input,
    answered as soon as it is read. Data goes to stdout, messages to stderr.
    """
    from attnviz.cli import output as out
    from attnviz.cli.settings import request

    out.check_probe(detect, text, target, pair)
    presentation = Presentation.checked(
        output_format=output_format,
        output=output,
        aggregate=aggregate,
        choice=choice,
        terminal_view=terminal_view,
        label_positions=label_positions,
        environment=environment,
        dtype=dtype,
        colour=colour,
        width=width,
        values=values,
        between=out.checked_between(between, pair),
        detect=detect,
    )
    asked = request(
        model=model,
        mode=mode,
        layer=layer,
        head=head,
        settings=settings,
        text=text,
        target=target,
        products=products.drawn(settings) if presentation.drawn else products,
    )
    extractor = asked.open(environment)
    stream = (
        extractor.extract(line, asked.request, target=target, pair=pair)
        for line in out.inputs(text, extractor)
    )
    presentation.present(stream, environment)
