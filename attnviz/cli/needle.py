"""`attnviz needle`: a needle-in-a-haystack sweep, and the retrieval heads it finds."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnviz import signals
from attnviz.atomic_files import open_output
from attnviz.choices import Output
from attnviz.cli import declarations as d
from attnviz.cli import output as out
from attnviz.cli.app import Terminated
from attnviz.cli.environment import NO_TERMINAL, Environment, passes_shown, stdout_console
from attnviz.cli.generate import LanguageModelOption
from attnviz.cli.option_kinds import (
    max_new_tokens_option,
    output_option,
    picture_option,
    top_heads_option,
)
from attnviz.cli.output import number
from attnviz.cli.pictures import figure_settings
from attnviz.cli.settings import Reading, needle_settings
from attnviz.cli.shared import NOTHING_SHARED, Shared, sharing
from attnviz.errors import UsageError, warn
from attnviz.inputs import read_whole
from attnviz.needle import (
    DEFAULT_ANSWER,
    DEFAULT_DEPTHS,
    DEFAULT_LENGTHS,
    DEFAULT_NEEDLE,
    DEFAULT_QUESTION,
    ROW_COLUMNS,
    Needle,
    NeedleResults,
    Sweep,
    parse_cell,
    parse_depths,
    parse_lengths,
)
from attnviz.outputs import TABLE_DATA, formats_named, refuse_unused, suffixes_of
from attnviz.safe_text import display_label
from attnviz.writers import write_table

if TYPE_CHECKING:
    from rich.console import Group

    from attnviz.needle import Cell
    from attnviz.progress import Listener
    from attnviz.render.style import Style

SWEEP_PANEL = "Sweep"
in_sweep = d.panel(SWEEP_PANEL)

FormatOption = d.format_option(d.TableFormat, f"{formats_named(d.TABLES)}.")
LengthsOption = Annotated[
    str,
    in_sweep(
        "--lengths",
        metavar="N,N,…",
        help="Prompt lengths in tokens, the question included (k: a thousand, so 32k is "
        "32,000 tokens).",
    ),
]
DepthsOption = Annotated[
    str,
    in_sweep(
        "--depths",
        metavar="D,D,…",
        help="Where the needle goes in the haystack: 0 its start, 1 its end.",
    ),
]
HaystackOption = Annotated[
    str | None,
    in_sweep(
        "--haystack",
        metavar="FILE",
        show_default="a text shipped with attnviz",
        help="The filler text, read whole (repeated, with a warning, where too short).",
    ),
]
NeedleOption = Annotated[
    str,
    typer.Option(
        "--needle", metavar="TEXT", rich_help_panel=SWEEP_PANEL, help="The hidden sentence."
    ),
]
QuestionOption = Annotated[
    str,
    typer.Option(
        "--question", metavar="TEXT", rich_help_panel=SWEEP_PANEL, help="Asked after the haystack."
    ),
]
AnswerOption = Annotated[
    str,
    in_sweep(
        "--answer",
        metavar="TEXT",
        help="What must come back; part of the needle (the tokens a retrieval head copies).",
    ),
]
MaxNewTokensOption = max_new_tokens_option(
    1000,
    "Tokens each answer may take (writing stops once the answer is there).",
    rich_help_panel=SWEEP_PANEL,
)
TopOption = Annotated[
    int,
    typer.Option("--top", metavar="N", min=1, help="Heads listed in the table and the picture."),
]
OutputOption = output_option(
    f"Write the results to PATH instead of stdout; {suffixes_of(TABLE_DATA)} picks the format."
)
PictureOption = picture_option(
    "Also draw the lengths × depths grid of answered cells beside the top retrieval "
    "heads (.png, .svg or .pdf)."
)
TopHeadsOption = top_heads_option(
    "Also draw, below --picture's sweep, where the N best retrieval heads look in one "
    "cell (--cell) while the model writes: a strip per head, a row per token written, "
    "the prompt across in bins."
)
CellOption = Annotated[
    str | None,
    typer.Option(
        "--cell",
        metavar="LENGTH,DEPTH",
        show_default="the longest length, the middle depth",
        help="The cell --top-heads draws, such as 16k,0.5: one of --lengths and one of --depths.",
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No line per cell on stderr.")]


@sharing(needle_settings, figure_settings)
def needle(
    model: LanguageModelOption,
    lengths: LengthsOption = DEFAULT_LENGTHS,
    depths: DepthsOption = DEFAULT_DEPTHS,
    haystack: HaystackOption = None,
    needle: NeedleOption = DEFAULT_NEEDLE,
    question: QuestionOption = DEFAULT_QUESTION,
    answer: AnswerOption = DEFAULT_ANSWER,
    max_new_tokens: MaxNewTokensOption = 24,
    top: TopOption = 10,
    output_format: FormatOption = Output.TABLE,
    output: OutputOption = None,
    picture: PictureOption = None,
    top_heads: TopHeadsOption = None,
    cell: CellOption = None,
    quiet: QuietOption = False,
    shared: Shared = NOTHING_SHARED,
) -> None:
    """Hide a sentence in filler text at several lengths and depths, ask for it back,
    and find the heads that retrieve it.

    Each cell is a prompt of exactly the length asked for; the model answers
    greedily and the cell is answered when the answer comes back. While it
    writes, each head's row is read from the model's own queries and keys: a
    head's retrieval score is the share of the answer's tokens it copies (the
    key it weighs most holds the token being written), its span the weight it
    gives the needle. Over the sweep: retrieval averaged over answered cells,
    span over all.
    """
    sweep = Sweep(
        parse_lengths(lengths),
        parse_depths(depths),
        Needle(needle, question, answer),
        max_new_tokens,
        chat=shared.settings.chat,
    )
    if top_heads is None and cell is not None:
        raise UsageError("--cell names the cell --top-heads draws: give --top-heads N too")
    if top_heads is not None:
        if picture is None:
            raise UsageError("--top-heads draws below the sweep's picture: give --picture PATH")
        strips_of = sweep.middle_cell() if cell is None else parse_cell(cell)
        sweep = replace(sweep, strips_of=strips_of)
    filler = None if haystack is None else read_whole(haystack)
    output_format, drawn = out.results_destinations(output, output_format, picture)
    if picture is None:
        refuse_unused(shared.picture.given(), "the picture (--picture FILE)", "the sweep's data")
    written = _Written(
        output_format, top, shared.environment, output, picture, drawn, top_heads,
        shared.picture.style(),
    )  # fmt: skip
    asked = shared.request(Reading(model))
    extractor = asked.open(shared.environment)
    done: list[Cell] = []
    try:
        shown = passes_shown(NO_TERMINAL if quiet else shared.environment)
        with shown as bar:  # on a terminal, a bar of cells under the lines
            results = extractor.needle(sweep, filler, _progress(done, quiet, bar))
    except (KeyboardInterrupt, Terminated):
        if not done:
            raise
        written.keep_finished(NeedleResults(extractor.name, sweep, done))
        raise
    written.write(results)


@dataclass(frozen=True)
class _Written:
    """Where and how a sweep's results go: data (to a file or stdout) and a picture."""

    output_format: Output
    top: int
    environment: Environment
    output: str | None
    picture: str | None
    drawn: Output | None
    top_heads: int | None
    style: Style

    def files(self) -> list[str]:
        return [name for name in (self.output, self.picture) if name not in (None, d.STDIO)]

    def partial(self) -> _Written:
        """An interrupted sweep's: a file named for the sweep keeps what it held (an
        earlier, whole sweep) until a whole sweep replaces it; the finished cells go
        beside it."""
        named = (self.output, self.picture)
        output, picture = (None if name is None else _partial(name) for name in named)
        return replace(self, output=output, picture=picture)

    def keep_finished(self, finished: NeedleResults) -> None:
        """An interrupted sweep's finished cells, written where :meth:`partial` says and
        marked partial, said in one line."""
        with signals.deferred():  # a second signal waits until the finished cells are out
            partial = self.partial()
            where = f" to {', '.join(partial.files())}" if partial.files() else ""
            count = len(finished.cells)
            warn(
                f"interrupted after {count} of {len(finished.sweep.cells())} cells: the {count} "
                f"finished are written{where}, marked partial"
            )
            partial.write(finished)

    def write(self, results: NeedleResults) -> None:
        _write(results, self.output_format, self.top, self.environment, self.output or d.STDIO)
        if self.drawn is not None:
            # numpy: after the options are checked (a usage error loads none)
            from attnviz.render.needle import needle_picture

            drawing = needle_picture(results, self.drawn, self.top, self.top_heads or 0, self.style)
            with open_output(str(self.picture), binary=True) as stream:
                stream.write(drawing)


def _partial(name: str) -> str:
    """Where an interrupted sweep's cells go instead of ``name``: ``sweep.json`` ->
    ``sweep.partial.json``, or the first of ``sweep.partial-2.json``… that is free (a file
    already there, an earlier sweep's or the user's, is never written over); ``-`` stays
    stdout."""
    if name == d.STDIO:
        return name
    path = Path(name)
    count = 1
    while (found := path.with_name(f"{path.stem}.partial{_nth(count)}{path.suffix}")).exists():
        count += 1
    return str(found)


def _nth(count: int) -> str:
    return "" if count == 1 else f"-{count}"


def _progress(done: list[Cell], quiet: bool, bar: Listener | None = None):
    """Each finished cell kept in ``done`` (an interrupted sweep writes those), and said
    on stderr in a line unless ``quiet`` (and counted on a terminal's ``bar``)."""
    started = time.monotonic()

    def finished(count: int, cells: int, cell: Cell) -> None:
        done.append(cell)
        if bar is not None:
            bar("needle cell", count, cells)
        if quiet:
            return
        said = "answered" if cell.answered else f"not answered: {cell.response.strip()!r}"
        print(
            display_label(
                f"attnviz: cell {count}/{cells} · {cell.tokens:,} tokens · depth "
                f"{cell.depth:g} · {said} · {time.monotonic() - started:.1f} s"
            ),
            file=sys.stderr,
            flush=True,
        )

    return finished


def _write(
    results: NeedleResults, output_format: Output, top: int, environment: Environment, to: str
) -> None:
    if output_format is Output.JSON:
        write_table(Output.JSON, [], [], to, results.document(), key="_")
    elif output_format in TABLE_DATA:
        write_table(output_format, results.rows(), ROW_COLUMNS, to)
    else:
        stdout_console(d.ColourChoice.AUTO, None, environment).print(_tables(results, top))


def _tables(results: NeedleResults, top: int) -> Group:
    from rich.console import Group
    from rich.table import Table

    grid = Table(title="answered (✓) per length and depth", box=None, title_justify="left")
    grid.add_column("length", justify="right")
    for depth in results.sweep.depths:
        grid.add_column(f"{depth:g}", justify="center")
    marks = results.grid()
    for row, length in enumerate(results.sweep.lengths):
        grid.add_row(f"{length:,}", *("✓" if mark == 1 else "✗" for mark in marks[row]))
    heads = Table(title=f"top {top} retrieval heads", box=None, title_justify="left")
    for column in ("layer", "head", "retrieval", "span"):
        heads.add_column(column, justify="right")
    for score in results.heads()[:top]:
        retrieval = "–" if score.retrieval is None else number(score.retrieval)
        heads.add_row(str(score.layer), str(score.head), retrieval, number(score.span))
    answered = sum(cell.answered for cell in results.cells)
    partial = f" (partial: {len(results.cells)} of {results.planned})" if results.partial else ""
    summary = (
        f"{display_label(results.model)} · answered {answered} of {len(results.cells)} cells"
        f"{partial} · "
        "retrieval: share of the answer's tokens copied (mean over answered cells); span: "
        "weight on the needle (mean over all cells)"
    )
    return Group(summary, "", grid, "", heads)
