"""`attnviz show`: every selected head as a labelled heatmap, or the maps as data."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from attnviz.atomic_files import check_writable
from attnviz.choices import Output, View
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.answer_settings import answer_options
from attnviz.cli.bundles import bundle
from attnviz.cli.environment import Environment
from attnviz.cli.option_kinds import output_option
from attnviz.cli.output import between_sentences
from attnviz.cli.pictures import HeadChoice, head_choice
from attnviz.cli.settings import (
    DEFAULT_READING,
    Reading,
    map_products,
    model_settings,
    reading_options,
)
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError
from attnviz.outputs import DATA, PICTURES, output_for, refuse_inapplicable, suffixes_of
from attnviz.request import asked_for
from attnviz.writers import Rendering, write

if TYPE_CHECKING:
    from attnviz.analysis.heads import TopHeads
    from attnviz.choices import Aggregate, Dtype
    from attnviz.cli.settings import MapProducts
    from attnviz.head_columns import Detector
    from attnviz.maps import AttentionMaps
    from attnviz.results import Result


# What show writes: the picture, data, a picture file or the page (auto: see the help).
SHOWN = (Output.TERMINAL, *DATA, Output.HTML, *PICTURES)
ShowFormat = d.some_of("ShowFormat", *SHOWN, auto=True)


def _names_another_format(output: str) -> bool:
    """A name whose suffix says it holds something that is not text (x.jpg, x.xlsx): a
    name without one, or a text's (maps.txt), gets ndjson."""
    import mimetypes

    kind, _ = mimetypes.guess_type(output, strict=False)
    return kind is not None and not kind.startswith("text/")


def _format_of(output: str) -> Output | None:
    """The format a file name says it holds (``maps.npz``: npz), if it says one."""
    return None if output == d.STDIO else output_for(output)


FormatOption = d.format_option(
    ShowFormat,
    "terminal: heatmaps. json: one AttentionMaps document. ndjson: one document per "
    "line, streamed. npz: numpy arrays. csv: a row per weight. html: the interactive page. "
    "png, svg, pdf: the model view as export draws it. auto: what the suffix of --output "
    "says, else terminal when stdout is a terminal (and no --output) or --view, --values, "
    "--top-heads or --label-positions asks for a picture, else ndjson.",
    rich_help_panel=d.OUTPUT_PANEL,
)
OutputOption = output_option(
    "Where data formats go: a file (written whole or not at all), or - for stdout.",
    kind=str,
    rich_help_panel=d.OUTPUT_PANEL,
)


@dataclass(frozen=True)
class Presenting:
    """How show and generate present maps, as the command line gives them: each field
    declares its option (:func:`~attnviz.cli.bundles.bundle`)."""

    aggregate: d.AggregateOption = None
    values: d.ValuesOption = False
    terminal_view: d.TerminalViewOption = d.AUTO
    label_positions: d.LabelPositionsOption = False
    output_format: FormatOption = d.AUTO
    output: OutputOption = d.STDIO
    dtype: d.DtypeOption = d.Dtype.FLOAT32
    colour: d.ColourOption = d.ColourChoice.AUTO
    width: d.WidthOption = None

    def checked(
        self,
        choice: HeadChoice,
        environment: Environment,
        detect: Detector | None = None,
        answered: bool = False,
        between: str | None = None,
    ) -> Presentation:
        """The output options checked together, before any model is loaded."""
        output_format = self.output_format
        by_suffix = _format_of(self.output)
        if output_format is None and by_suffix is not None:
            output_format = by_suffix  # -o maps.npz writes npz
        elif by_suffix is not None and by_suffix is not output_format:
            raise UsageError(
                f"--format {output_format} and the suffix of {self.output} ({by_suffix.value}) "
                "disagree: drop --format, or name the file for what it holds"
            )
        if output_format is None and by_suffix is None and _names_another_format(self.output):
            raise UsageError(  # x.jpg: never ndjson under a picture's name
                f"{self.output} names a format attnviz does not write: name it "
                f"{suffixes_of(SHOWN)}, or give --format"
            )
        top = out.top_heads_for(choice, self.aggregate, detect, answered)
        if output_format is None:  # a picture was asked for, even into a pipe
            picture = self.terminal_view is not None or top is not None or self.values
            # A file is no terminal, whatever stdout is: one that its suffix names no
            # format of gets data.
            onto_terminal = environment.stdout_is_terminal and self.output == d.STDIO
            terminal = onto_terminal or picture or self.label_positions
            output_format = Output.TERMINAL if terminal else Output.NDJSON
        if output_format is Output.TERMINAL and self.output != d.STDIO:
            raise UsageError(
                "--output goes with a data --format; the terminal picture goes to stdout"
            )
        given = {
            f"--color {self.colour.value}": self.colour is not d.ColourChoice.AUTO,
            "--width": self.width is not None,
            f"--view {self.terminal_view}": self.terminal_view is not None,
            "--values": self.values,
            "--top-heads": top is not None,
            "--label-positions": self.label_positions,
            f"--dtype {self.dtype.value}": self.dtype is not d.Dtype.FLOAT32,
        }
        drawn = self.terminal_view or View.AUTO if output_format is Output.TERMINAL else View.MODEL
        refuse_inapplicable([flag for flag, was in given.items() if was], [output_format], drawn)
        check_writable(self.output)  # before a model loads, or a generation runs for minutes
        given = vars(self) | {"output_format": output_format}
        return Presentation(**given, top=top, between=between)


# Gives show and generate their presentation options as one ``presenting`` argument.
presenting_options = bundle("presenting", Presenting)
AS_GIVEN = Presenting()


@dataclass(frozen=True)
class Presentation:
    """How show (and generate) present maps: the output options, checked together before
    any model is loaded."""

    output_format: Output
    output: str
    dtype: Dtype
    colour: d.ColourChoice
    width: int | None
    values: bool
    terminal_view: View | None  # None: panels when they fit the terminal, else the grid
    label_positions: bool
    aggregate: Aggregate | None
    top: TopHeads | None
    between: str | None = None

    def products(self, shared: Shared) -> MapProducts:
        """What the maps hold: a picture's, drawn whole, only what it can show."""
        products = shared.products
        return products.drawn(shared.settings, self.aggregate) if self.drawn else products

    @property
    def is_terminal(self) -> bool:
        return self.output_format is Output.TERMINAL

    @property
    def drawn(self) -> bool:
        """A picture of the maps (the terminal's, a file's or the page), not their data."""
        return self.output_format not in DATA

    def present(self, stream: Iterable[AttentionMaps], environment: Environment) -> None:
        """Each input's maps, as they come: pictures to the terminal, data, or one picture."""
        # numpy: after the options are checked (a usage error loads none)
        from attnviz.analysis.aggregate import aggregate as combine

        if self.between is not None:
            stream = (between_sentences(maps, self.between) for maps in stream)
        if self.aggregate is not None:
            stream = (combine(maps, self.aggregate) for maps in stream)
        if self.output_format is not Output.TERMINAL:
            how = Rendering(top=self.top, label_positions=self.label_positions, dtype=self.dtype)
            write(stream, self.output_format, self.output, how)
            return
        if self.label_positions:
            stream = (maps.with_positions() for maps in stream)
        out.draw(
            stream,
            colour=self.colour,
            width=self.width,
            values=self.values,
            environment=environment,
            view=self.terminal_view or View.AUTO,
            top=self.top,
        )


@sharing(answer_options, head_choice, map_products, model_settings)
@presenting_options
@reading_options
def show(
    text: d.TextOrProbeArgument = None,
    detect: d.DetectOption = None,
    reading: Reading = DEFAULT_READING,
    target: d.TargetOption = None,
    presenting: Presenting = AS_GIVEN,
    pair: d.PairOption = None,
    between: d.BetweenOption = None,
    shared: Shared = NOTHING_SHARED,
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
    out.check_probe(detect, text, target, pair)
    presentation = presenting.checked(
        shared.choice,
        shared.environment,
        detect,
        answered=shared.effects.answer is not None,
        between=out.checked_between(between, pair),
    )
    asked = shared.request(
        reading,
        text=text,
        target=target,
        pair=pair,
        products=presentation.products(shared),
        aggregate=presenting.aggregate,
    )
    shared.effects.drawing(reading.model, presentation.top)
    shared.products.ranking(presentation.top)
    extractor = asked.open(shared.environment)
    lines = out.inputs(text, extractor)
    if shared.effects.answer is not None:  # the heads one text's answer needs
        line = out.only_one(lines, "--answer ranks the heads of one text")
        found = asked.run(extractor, line, shared.environment)
        presentation = replace(presentation, top=shared.effects.ranked(presentation.top, found))
        results: Iterator[Result] = iter([found])
    else:
        results = (asked.run(extractor, line) for line in lines)
    presentation.present((asked_for(found.maps) for found in results), shared.environment)
