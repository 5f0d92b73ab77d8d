"""Every output attnviz writes, declared once, and every presentation option, declared
once with the outputs it applies to.

An output has a kind (a picture in the terminal, a table, data, a picture file, the
interactive page), the file suffixes that name it and the views it can draw. Commands
take a subset of :class:`~attnviz.choices.Output` for ``--format`` and of
:class:`~attnviz.choices.View` for ``--view``; which option applies to which output is
the table :data:`APPLIES_TO`, and :func:`refuse_inapplicable` words every "X applies to
Y, not Z". Standard library and :mod:`attnviz.choices` only: the command line reads this
module to declare its options.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from attnviz.choices import FOREIGN_OUTPUTS, Output, View, chosen
from attnviz.errors import UsageError


class Kind(StrEnum):
    TERMINAL = "terminal"  # a picture drawn with characters, to stdout
    TABLE = "table"  # rows for a person to read, to stdout
    DATA = "data"  # the maps (or a command's results) as a document
    PICTURE = "picture"  # a picture file
    PAGE = "page"  # the interactive HTML page
    FOREIGN = "foreign"  # another tool's file (a circuit as EAP-IG's graph), to stdout


@dataclass(frozen=True)
class OutputSpec:
    kind: Kind
    suffixes: tuple[str, ...]  # lower-case file suffixes that name this output
    views: tuple[View, ...]  # the views it draws (none for data)
    name: str  # how a message names it
    # Its writer: a function of attnviz.writers, named here so that declaring options
    # imports no numpy or matplotlib. None: the command draws it on its console.
    writer: str | None = None
    records: bool = False  # a file holds one input's records after another's (a stream)
    # A table as text, a line per row, its cells separated by this (csv's comma): how the
    # maps' long form and every command's table of rows are written in it.
    delimiter: str | None = None


PICTURE_VIEWS = (View.HEAD, View.LAYER, View.MODEL)  # a picture's and the page's alike
TERMINAL_VIEWS = (View.AUTO, View.PANELS, View.GRID)

OUTPUTS: dict[Output, OutputSpec] = {
    Output.TERMINAL: OutputSpec(Kind.TERMINAL, (), TERMINAL_VIEWS, "the terminal picture"),
    Output.TABLE: OutputSpec(Kind.TABLE, (), (), "the table"),
    Output.JSON: OutputSpec(Kind.DATA, (".json",), (), "json output", "json_pieces"),
    Output.NDJSON: OutputSpec(
        Kind.DATA, (".ndjson", ".jsonl"), (), "ndjson output", "json_pieces", records=True
    ),
    Output.NPZ: OutputSpec(Kind.DATA, (".npz",), (), "npz output", "npz_pieces"),
    Output.CSV: OutputSpec(
        Kind.DATA, (".csv",), (), "csv output", "csv_pieces", records=True, delimiter=","
    ),
    Output.PNG: OutputSpec(
        Kind.PICTURE, (".png",), PICTURE_VIEWS, "a png picture", "picture_pieces"
    ),
    Output.SVG: OutputSpec(
        Kind.PICTURE, (".svg",), PICTURE_VIEWS, "an svg picture", "picture_pieces"
    ),
    Output.PDF: OutputSpec(
        Kind.PICTURE, (".pdf",), PICTURE_VIEWS, "a pdf picture", "picture_pieces"
    ),
    Output.HTML: OutputSpec(
        Kind.PAGE, (".html", ".htm"), PICTURE_VIEWS, "the interactive page", "page_pieces"
    ),
    **{
        output: OutputSpec(Kind.FOREIGN, (), (), foreign.name)
        for output, foreign in FOREIGN_OUTPUTS.items()
    },
}
_BY_SUFFIX = {suffix: output for output, spec in OUTPUTS.items() for suffix in spec.suffixes}


def of_kind(*kinds: Kind) -> tuple[Output, ...]:
    """The outputs of these kinds, in declaration order."""
    return tuple(output for output, spec in OUTPUTS.items() if spec.kind in kinds)


PICTURES = of_kind(Kind.PICTURE)  # png, svg, pdf
# What a command's table of rows (heads, stats, trace, needle) is written as: a json
# document, or a line per row.
TABLE_DATA = (Output.JSON, *(output for output, spec in OUTPUTS.items() if spec.delimiter))
DATA = of_kind(Kind.DATA)  # json, ndjson, npz, csv
# What a batch writes: every output with a writer that holds one input (a file each);
# ndjson and csv, streams of records, have no place in a folder of files per input.
BATCH = tuple(
    output for output, spec in OUTPUTS.items() if spec.writer is not None and not spec.records
)


def output_for(path: str | Path) -> Output | None:
    """The output a file name says it holds (``maps.npz``: npz), or None."""
    return _BY_SUFFIX.get(Path(path).suffix.lower())


def _listed(names: list[str], conjunction: str = "and") -> str:
    """'a, b and c' (or 'a, b or c'), for a message."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


def formats_named(outputs: Iterable[Output]) -> str:
    """``png, svg, pdf, json, npz or html (the interactive page)``: the formats an option
    takes, as its help lists them; the page is said to be one."""
    return _listed(
        [
            f"{output.value} ({OUTPUTS[output].name})"
            if OUTPUTS[output].kind is Kind.PAGE
            else output.value
            for output in outputs
        ],
        "or",
    )


def suffixes_of(outputs: Iterable[Output]) -> str:
    """``.png, .svg or .pdf``: the suffixes that name these outputs, for a message."""
    return _listed([OUTPUTS[o].suffixes[0] for o in outputs if OUTPUTS[o].suffixes], "or")


def output_of_file(path: str | Path, allowed: Iterable[Output]) -> Output:
    """The output among ``allowed`` that the suffix of ``path`` names; any other suffix
    is a usage error saying which ones are understood."""
    allowed = tuple(allowed)
    found = output_for(path)
    if found not in allowed:
        raise UsageError(f"cannot tell the format of {path}: name it {suffixes_of(allowed)}")
    return found


def view_for(view: View | str, output: Output) -> View:
    """``view`` as one of the views ``output`` draws, or a usage error naming them."""
    return chosen(View, view, "view", among=OUTPUTS[output].views)


def describe(outputs: Iterable[Output]) -> str:
    """How a message names some outputs: 'the terminal picture and png, svg and pdf
    pictures', 'json and npz output', 'data (json, ndjson, npz, csv)'."""
    outputs = set(outputs)
    names = []
    for kind in Kind:
        some = [output for output in OUTPUTS if output in outputs and OUTPUTS[output].kind is kind]
        if not some:
            continue
        values = _listed([output.value for output in some])
        if kind is Kind.DATA:
            names.append(
                "data (json, ndjson, npz, csv)" if set(some) == set(DATA) else f"{values} output"
            )
        elif kind is Kind.PICTURE:
            names.append(OUTPUTS[some[0]].name if len(some) == 1 else f"{values} pictures")
        else:
            names.append(OUTPUTS[some[0]].name)
    return _listed(names)


@dataclass(frozen=True)
class Scope:
    """The outputs an option does something for, and what to do instead elsewhere; and
    where it does something in only some of their views, those views."""

    outputs: frozenset[Output]
    fix: str = "leave it out"
    views: frozenset[View] | None = None  # None: every view of those outputs
    views_fix: str = "leave it out"


_TERMINAL = Scope(frozenset({Output.TERMINAL}))
_PICTURE_FILES = Scope(frozenset(PICTURES))
_DRAWN = frozenset({Output.TERMINAL, *PICTURES})

# Every presentation option and the outputs it applies to: given for any other output it
# is a usage error, never dropped unsaid. --view VIEW applies where VIEW is drawn.
APPLIES_TO: dict[str, Scope] = {
    "--color": _TERMINAL,
    "--width": _TERMINAL,
    "--values": Scope(
        _DRAWN,
        # auto: panels when they fit the terminal (the grid then says it has no numbers)
        views=frozenset({View.HEAD, View.PANELS, View.AUTO}),
        views_fix="numbers are printed in one whole map: --view head in a picture, panels "
        "in the terminal",
    ),
    "--top-heads": Scope(
        _DRAWN,
        "it chooses heads to draw; data holds the selected layers × heads whole and the "
        "page shows every head: pick them with --layer and --head",
    ),
    "--label-positions": Scope(
        frozenset({*_DRAWN, Output.HTML, Output.CSV}),
        "json, ndjson and npz keep the tokens as they are (a token's position is its index)",
    ),
    "--cmap": _PICTURE_FILES,
    "--dpi": _PICTURE_FILES,
    "--vmax": _PICTURE_FILES,
    "--figsize": _PICTURE_FILES,
    "--font-size": _PICTURE_FILES,
    "--title": Scope(frozenset({*PICTURES, Output.HTML})),
    "--no-title": Scope(frozenset({*PICTURES, Output.HTML})),
    "--dtype": Scope(frozenset(DATA)),
}


def scope_of(flag: str) -> Scope:
    """What the option ``flag`` (as the user wrote it: ``--view grid``) applies to."""
    name, _, value = flag.partition(" ")
    if name == "--view":
        view = View(value)
        return Scope(frozenset(o for o, spec in OUTPUTS.items() if view in spec.views))
    return APPLIES_TO[name]


def refuse_unused(flags: Iterable[str], applies_to: str, here: str, fix: str = "") -> None:
    """The one wording of options given where they do nothing: '--x applies to Y, not Z:
    fix', a usage error, instead of the options dropped unsaid. None given: nothing."""
    flags = list(flags)
    if flags:
        verb, them = ("applies", "it") if len(flags) == 1 else ("apply", "them")
        raise UsageError(
            f"{', '.join(flags)} {verb} to {applies_to}, not {here}: {fix or f'leave {them} out'}"
        )


def refuse_inapplicable(
    given: Iterable[str], outputs: Iterable[Output], view: View | None = None
) -> None:
    """The first option ``given`` (flags as the user wrote them, ``--color always``) that
    does nothing for any of ``outputs``, drawn in ``view`` where they draw it, is a usage
    error: '--x applies to Y, not Z'."""
    outputs = tuple(outputs)
    for flag in given:
        scope = scope_of(flag)
        if scope.outputs.isdisjoint(outputs):
            refuse_unused([flag], describe(scope.outputs), describe(outputs), scope.fix)
        drawn_in_view = [output for output in outputs if view in OUTPUTS[output].views]
        if scope.views is None or view is None or view in scope.views or not drawn_in_view:
            continue
        if scope.outputs.isdisjoint(set(outputs) - set(drawn_in_view)):
            views = [v.value for v in View if v in scope.views and v is not View.AUTO]
            applies_to = f"the {_listed(views)} view{'s' * (len(views) > 1)}"
            refuse_unused([flag], applies_to, f"the {view} view", scope.views_fix)
