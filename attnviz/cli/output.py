"""Where output goes: the helpers that write one picture or one document, the maps a
command draws and the tables it prints (the environment and the console they are drawn
on: :mod:`attnviz.cli.environment`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from attnviz.atomic_files import STDIO, check_writable, open_output, write_text
from attnviz.choices import Output, View
from attnviz.cli.declarations import ColourChoice
from attnviz.cli.environment import Environment, stdout_console, uses_colour
from attnviz.errors import UsageError
from attnviz.inputs import read_texts
from attnviz.outputs import PICTURES, TABLE_DATA, output_for, output_of_file, refuse_unused
from attnviz.selection import resolve_held
from attnviz.writers import ONE_TEXT

if TYPE_CHECKING:
    from rich.table import Table

    from attnviz.analysis.heads import TopHeads
    from attnviz.choices import Aggregate, View
    from attnviz.cli.pictures import HeadChoice
    from attnviz.extractor import Extractor
    from attnviz.head_columns import Detector
    from attnviz.maps import AttentionMaps
    from attnviz.panels import MapPanel

T = TypeVar("T")


ONE_MAPS = "pick one line of the ndjson first (e.g. sed -n 1p)"


def only_one(items: Iterable[T], hint: str = ONE_TEXT) -> T:
    """The one input a command reads; several (lines on stdin, records in a file) are
    refused, with ``hint``: what to do instead."""
    stream = iter(items)
    first = next(stream)
    if next(stream, None) is not None:
        raise UsageError(f"this command reads one input, but several were given: {hint}")
    return first


def picture_or_data(
    output: str | None,
    output_format: Output,
    picture_options: list[str],
    kinds: tuple[Output, ...] = PICTURES,
) -> Output | None:
    """What a command that draws a picture (-o FILE, of ``kinds``) or writes data (-f)
    writes: the picture's format, or None for data or the table; both asked, or picture
    options (``picture_options``, as given) without a picture, a usage error."""
    drawn = None if output is None else output_of_file(output, kinds)
    what = "a picture" if kinds == PICTURES else "a picture or a page"
    if drawn is not None and output_format is not Output.TABLE:
        raise UsageError(
            f"--picture (-o) writes {what}; -f writes data to stdout: give one of them"
        )
    if drawn not in PICTURES:
        refuse_unused(picture_options, "a picture (--picture FILE.png)", "this output")
    return drawn


def write_drawn(
    found: Any,
    drawn: Output | None,
    output: str | None,
    output_format: Output,
    picture: Callable[[], bytes],
    table: Callable[[int], Any],
    width: int | None,
    environment: Environment,
) -> None:
    """``found`` as :func:`picture_or_data` chose: ``picture()``'s bytes into ``output``
    beside the table (as ``heads --picture`` writes them), data on stdout, or
    ``table(width)``'s rich renderable there."""
    if drawn is not None:
        assert output is not None
        with open_output(output, binary=True) as stream:
            stream.write(picture())
    if output_format in TABLE_DATA:
        write_data(found, output_format)
    else:
        console = stdout_console(ColourChoice.AUTO, width, environment)
        console.print(table(console.width))


def write_data(found: Any, output_format: Output) -> None:
    """A command's result (a trace, a lens) on stdout as data: its JSON document, or its
    records as a table of rows (csv)."""
    if output_format is Output.JSON:
        # numpy: the data formats read it
        from attnviz.data_formats import dump_json
        from attnviz.schema import envelope

        write_stdout(dump_json(envelope(found.document())))
        return
    from attnviz.writers import write_table  # the writers read numpy

    records = found.records()
    write_table(output_format, records, list(records[0]), STDIO)


def write_stdout(content: str) -> None:
    write_text(content, "-")


def top_heads_for(
    choice: HeadChoice,
    aggregate: Aggregate | None,
    detect: Detector | None = None,
    answered: bool = False,
) -> TopHeads | None:
    """The --top-heads choice, refused with an aggregate (whose maps are no heads)."""
    top = choice.top(detect, answered)
    if top is not None and aggregate is not None:
        raise UsageError(
            "--top-heads picks heads, --aggregate combines them: use one (or rank heads by "
            "--by first and aggregate with --layer/--head)"
        )
    return top


def check_probe(
    detect: Detector | None,
    text: str | None,
    target: str | None,
    pair: str | None,
    saved: str | None = None,
) -> None:
    """The input is TEXT (or --from), or the detectors' probe of --detect: one of them, and
    the probe takes no target or sentence B."""
    if detect is None:
        if text is None and saved is None:
            raise UsageError("give TEXT to look at, or --detect for the detectors' probe")
        return
    if text is not None or saved is not None:
        raise UsageError("--detect reads the detectors' own probe: give no TEXT or --from")
    named = (("--target", target), ("--pair", pair))
    refuse_unused([flag for flag, value in named if value is not None], "a text", "the probe")


def inputs(text: str | None, extractor: Extractor) -> Iterator[str]:
    """The lines of TEXT; without one (--detect, checked by check_probe), the probe."""
    return iter([extractor.detection_probe()]) if text is None else read_texts(text)


def select_held(maps: AttentionMaps, layer: str, head: str) -> AttentionMaps:
    """The layers and heads asked for, among those saved maps hold."""
    if (layer, head) == ("all", "all"):
        return maps
    if maps.aggregate is not None:
        raise UsageError("these saved maps are an aggregate: there are no layers or heads to pick")
    return maps.select(
        layers=resolve_held(layer, maps.layers, "layer"),
        heads=resolve_held(head, maps.heads, "head"),
    )


def checked_between(between: str | None, pair: str | None) -> str | None:
    """--between, written as it must be and given with --pair."""
    # numpy: after the options are checked (a usage error loads none)
    from attnviz.maps import BETWEEN

    if between is None:
        return None
    between = between.lower()
    if between not in BETWEEN:
        raise UsageError(f"--between {between!r}: give {', '.join(BETWEEN)}")
    if pair is None:
        raise UsageError("--between picks the sentences of a pair: give sentence B with --pair")
    if pair is not None and not pair.strip():
        raise UsageError("the pair is empty: give some words to look at")
    return between


def between_sentences(maps: AttentionMaps, which: str) -> AttentionMaps:
    try:
        return maps.between_sentences(which)
    except ValueError as error:
        raise UsageError(f"--between: {error}") from None


def chosen_panels(maps: AttentionMaps, top: TopHeads) -> list[MapPanel]:
    """The maps ``top`` picks, with a ranking that does not apply as a usage error."""
    try:
        return top.panels(maps)
    except ValueError as error:
        raise UsageError(f"--top-heads: {error}") from None


def rows_table(**options: Any) -> Table:
    """A rich table of rows for a person to read (heads, stats, diff): no rules between
    columns and one space of padding, so that nine columns of numbers fit 80 characters."""
    from rich import box
    from rich.table import Table

    return Table(
        box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False, show_edge=False,
        caption_justify="left", **options,
    )  # fmt: skip


def number(value: float) -> str:
    """A statistic for a person to read: three decimals below 100, one from there on (a
    distance of 1028.5 tokens), so that a column of them keeps to eight characters."""
    return f"{value:z.3f}" if abs(value) < 100 else f"{value:z.1f}"


def column_header(name: str) -> str:
    """A long column name on two lines (previous_ / token), so that tables fit 80 columns."""
    head, _, tail = name.rpartition("_")
    return f"{head}_\n{tail}" if len(name) > 8 and head else name


def draw(
    stream: Iterable[AttentionMaps],
    *,
    colour: ColourChoice,
    width: int | None,
    values: bool,
    environment: Environment,
    view: View,
    top: TopHeads | None = None,
) -> None:
    """Each input's maps as terminal pictures, one after another, as they come.

    ``view`` auto draws panels when they fit the terminal's height and the grid
    when they do not; output that is not a terminal has no height and gets panels.
    ``top`` picks the maps to draw of each input (the heads worth looking at first).
    """
    # rich's drawing: after the options are checked (a usage error loads none)
    from attnviz.render.terminal import render
    from attnviz.render.terminal_grid import render_grid

    console = stdout_console(colour, width, environment)
    use_colour = uses_colour(console)
    for number, maps in enumerate(stream):
        if number:
            console.print()
        chosen = None if top is None else chosen_panels(maps, top)
        picture = None
        if view is not View.GRID or chosen is not None:
            picture = render(
                maps, width=console.width, use_colour=use_colour, values=values, panels=chosen
            )
        fits_auto = view is View.AUTO and environment.stdout_is_terminal and chosen is None
        if (
            fits_auto
            and picture is not None
            and len(console.render_lines(picture, pad=False)) > console.height
        ):
            picture = None
        if picture is None:
            height = console.height if environment.stdout_is_terminal else None
            picture = render_grid(
                maps, width=console.width, height=height, use_colour=use_colour, values=values
            )
        console.print(picture)


def results_destinations(
    output: str | None, asked: Output, picture: str | None
) -> tuple[Output, Output | None]:
    """Where a command's results (stats, needle) go, checked before any work (a name that
    cannot be written is refused now, not after hours of it): the format of the data,
    and the picture's (None: no --picture)."""
    if output is not None:
        asked = _data_file_format(output, asked)
        check_writable(output)
    if picture is None:
        return asked, None
    drawn = output_of_file(picture, PICTURES)
    check_writable(picture)
    return asked, drawn


def _data_file_format(output: str, asked: Output) -> Output:
    """The format of a command's results (stats, needle) written to ``output`` with -o:
    its suffix's, json or csv; a picture is --picture's."""
    by_suffix = output_for(output)
    if by_suffix in PICTURES:
        raise UsageError(f"-o writes the results as data: draw the picture with --picture {output}")
    if by_suffix not in TABLE_DATA:
        if asked is Output.TABLE:
            named = " or ".join(f".{each.value}" for each in TABLE_DATA)
            raise UsageError(f"cannot tell the format of {output}: name it {named}")
        return asked
    if asked is not Output.TABLE and asked is not by_suffix:
        raise UsageError(
            f"--format {asked.value} and the suffix of {output} ({by_suffix.value}) disagree: "
            "pick one"
        )
    return by_suffix
