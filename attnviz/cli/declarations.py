"""The options and arguments the commands share, declared once.

Only typer and the enums of :mod:`attnviz.choices` are imported here: every
command module imports this one, and ``attnviz --help`` imports every command
module.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer

from attnviz.builtin.config import BUILTIN as BUILTIN  # --model's default, for commands
from attnviz.choices import Aggregate, Dtype, Mode, Output, View, Weighting, labelled
from attnviz.cli.completion import complete_model
from attnviz.head_columns import DETECTORS, Detector, listed
from attnviz.outputs import PICTURE_VIEWS, TABLE_DATA, TERMINAL_VIEWS


def number(low: float, high: float = math.inf) -> Callable[[str], float]:
    """A number option's parser, ``low`` to ``high``: nan (above typer's range!) is none."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and low <= value <= high):
            bounds = f"of at least {low:g}" if high == math.inf else f"from {low:g} to {high:g}"
            raise typer.BadParameter(f"{text!r} is not a number {bounds}")
        return value

    return parse


def panel(name: str) -> Callable[..., Any]:
    """``typer.Option`` for the options --help lists under the heading ``name``."""
    return functools.partial(typer.Option, rich_help_panel=name)


SELECTION_PANEL = "Layers and heads"
LONG_PANEL = "Long inputs"
MODEL_PANEL = "Pretrained models"
STACK_PANEL = "Built-in stack (without --model)"
OUTPUT_PANEL = "Output"
PICTURE_PANEL = "Pictures"
SCALE_PANEL = "Scale"
in_selection = panel(SELECTION_PANEL)
in_long = panel(LONG_PANEL)
in_output = panel(OUTPUT_PANEL)
in_model = panel(MODEL_PANEL)
in_stack = panel(STACK_PANEL)
in_pictures = panel(PICTURE_PANEL)
in_scale = panel(SCALE_PANEL)
STDIO = "-"
AUTO_POOL = 1024  # pictures pool longer inputs into this many bins unless --rows or --pool


class ColourChoice(StrEnum):
    AUTO = "auto"  # colour when stdout is a terminal, unless NO_COLOR is set
    ALWAYS = "always"
    NEVER = "never"


AUTO = "auto"  # a --format or --view value meaning: decided by the command (None)


# One idea, two spellings: a command that takes one takes the other (heads -f terminal).
_SAME_IDEA = {"table": "terminal", "terminal": "table"}


def some_of(name: str, *members: StrEnum, auto: bool = False) -> Any:
    """A str enum of some ``members`` of one vocabulary (Output, View), and ``auto`` if
    asked, for typer to parse, complete and list as an option's choices; :func:`as_whole`
    gives the command its vocabulary's members (:data:`_SAME_IDEA`'s spellings too)."""
    choices = [("AUTO", AUTO)] if auto else []
    choices += [(member.name, member.value) for member in members]
    values = {value for _, value in choices}
    aliases = {_SAME_IDEA[v]: v for v in values if _SAME_IDEA.get(v, v) not in values}
    choices += [(alias.upper(), alias) for alias in aliases]
    parsed = StrEnum(name, choices, module=__name__)  # type: ignore[misc]
    setattr(parsed, "_spelled_as", aliases)  # noqa: B010 (read by as_whole)
    return parsed


def as_whole(vocabulary: type[StrEnum]) -> Callable[[Any], Any]:
    """An option callback: what typer parsed, as members of ``vocabulary`` (a list stays a
    list), another spelling of an idea as the command's own; ``auto`` as None."""

    def one(item: Any) -> Any:
        aliases = getattr(type(item), "_spelled_as", {})
        return vocabulary(aliases.get(str(item), str(item)))

    def whole(value: Any) -> Any:
        if isinstance(value, list):
            return [one(item) for item in value]
        return None if value is None or value == AUTO else one(value)

    return whole


def format_option(choices: Any, help: str, **more: Any) -> Any:
    """The --format (-f) option of a command that writes ``choices`` (some of Output, or
    a list of them): declared here once, each command giving its choices and help. The
    command gets Output members, and None for ``auto``."""
    return Annotated[
        choices,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            case_sensitive=False,
            callback=as_whole(Output),
            help=help,
            **more,
        ),
    ]


def choice_option(
    kind: type[StrEnum], names: str | tuple[str, ...], lead: str, labels: Any, **more: Any
) -> Any:
    """An option (``names``: its name, or its name and aliases) that takes the words of
    ``kind`` that ``labels`` holds (a command's row of a vocabulary that another command
    takes more of), its help ``lead`` and each word with its label
    (:func:`attnviz.choices.labelled`)."""
    help = f"{lead}: {labelled(labels)}."
    spelled = (names,) if isinstance(names, str) else names
    if set(labels) == set(kind):
        return Annotated[kind, typer.Option(*spelled, case_sensitive=False, help=help, **more)]
    taken = some_of(kind.__name__, *labels)
    option = typer.Option(
        *spelled, case_sensitive=False, help=help, callback=as_whole(kind), **more
    )
    return Annotated[taken, option]


def view_option(choices: Any, help: str, **more: Any) -> Any:
    """The --view option of a command that draws ``choices`` (some of View): declared
    here once, each command giving its choices and help. The command gets View members,
    and None for ``auto`` (unless ``callback=None``: then auto is View.AUTO)."""
    more.setdefault("callback", as_whole(View))
    return Annotated[
        choices,
        in_output(
            "--view",
            metavar="VIEW",
            case_sensitive=False,
            help=help,
            **more,
        ),
    ]


def values_option(panel: str, help: str) -> Any:
    """The --values option (numbers in the cells), in the help ``panel`` of the command."""
    return Annotated[bool, typer.Option("--values", rich_help_panel=panel, help=help)]


TABLES, REPORTS = (Output.TABLE, *TABLE_DATA), (Output.TABLE, Output.JSON)
TableFormat = some_of("TableFormat", *TABLES)  # heads, stats, needle
ReportFormat = some_of("ReportFormat", *REPORTS)  # explain, top, diff, models
PictureView = some_of("PictureView", *PICTURE_VIEWS)
TerminalView = some_of("TerminalView", *TERMINAL_VIEWS)


ValuesOption = values_option(
    OUTPUT_PANEL, "Print the weights in the cells of the panels (not the grid)."
)
ViewOption = view_option(
    PictureView,
    "head: one map (pick it with --layer and --head). layer: the heads of one layer in a "
    "grid. model: every selected layer × head as small multiples.",
)
TerminalViewOption = view_option(
    TerminalView,
    "panels: a labelled heatmap per head. grid: every layer × head as a small "
    "thumbnail, layers as rows and heads as columns (a whole model on one screen). auto: "
    "panels when they fit the terminal's height, else the grid.",
)
RenderViewOption = view_option(
    View | None,
    "In the terminal (as show): panels, grid, or auto (panels when they fit the "
    "terminal's height, else the grid). In a picture (-o, as export): head (one map), "
    "layer (one layer's heads) or model (every selected map).  [default: auto in the "
    "terminal, model in a picture]",
    callback=None,
    show_default=False,
)

DtypeOption = Annotated[
    Dtype,
    in_output(
        "--dtype",
        metavar="DTYPE",
        case_sensitive=False,
        help="How stored weights are written: float16 halves the size of json and npz data.",
    ),
]


# How every TEXT argument is read (attnviz.inputs.read_texts).
TEXT_HELP = (
    "The text to look at; @FILE reads a whole file as one text (newlines kept, up to 4 MiB; "
    "@- all of standard input), - each line of standard input as one text"
)
TextArgument = Annotated[str, typer.Argument(metavar="TEXT", help=f"{TEXT_HELP}.")]


def text_or(option: str) -> Any:
    """TEXT, which ``option`` can stand in for."""
    help = f"{TEXT_HELP} (or give {option})."
    return Annotated[str | None, typer.Argument(metavar="TEXT", show_default=False, help=help)]


OptionalTextArgument = text_or("--from")
TextOrProbeArgument = text_or("--detect")
DetectOption = Annotated[
    Detector | None,
    typer.Option(
        "--detect",
        metavar="DETECTOR",
        case_sensitive=False,
        help=f"Look for heads of one kind ({listed(DETECTORS)}) on the detectors' probe, "
        "random tokens repeated (seeded), instead of a text; heads are ranked by that score.",
    ),
]
FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        metavar="SOURCE",
        help="Saved maps instead of TEXT: a json, ndjson or npz file that show or generate "
        "wrote (- for stdin); no model is loaded.",
    ),
]
SAVED_HELP = "Saved maps: a json, ndjson or npz file written by attnviz, or - for stdin."
SavedArgument = Annotated[str, typer.Argument(metavar="SOURCE", help=SAVED_HELP)]
ModeOption = Annotated[
    Mode | None,
    typer.Option(
        "--mode",
        "-m",
        metavar="MODE",
        case_sensitive=False,
        show_default="the model's own: self; masked for a decoder; cross for an "
        "encoder-decoder given --target",
        help="self: every token sees every token. masked: causal, a token sees itself and "
        "earlier tokens. cross: --target tokens (rows) attend over TEXT tokens (columns).",
    ),
]
TargetOption = Annotated[
    str | None,
    typer.Option(
        "--target", "-t", metavar="TEXT", help="Cross mode: the text whose tokens are the queries."
    ),
]
LayerOption = Annotated[
    str,
    in_selection(
        "--layer",
        "-l",
        metavar="LAYERS",
        help="Layers to show: an index, a list (0,2), a range (0-2), all; negative counts from "
        "the end.",
    ),
]
HeadOption = Annotated[
    str,
    in_selection(
        "--head",
        metavar="HEADS",
        help="Heads to show, written like --layer.",
    ),
]


ModelOption = Annotated[
    str,
    in_model(
        "--model",
        metavar="MODEL",
        autocompletion=complete_model,
        help="builtin (the seeded stack; builtin:seed=1 and the rest of the name its maps "
        "record pick its settings), an alias (see attnviz models), a directory saved with "
        "save_pretrained, or a Hugging Face id from the local cache.",
    ),
]
RowsOption = Annotated[
    str | None,
    in_long(
        "--rows",
        metavar="ROWS",
        help="Keep only these query rows, each over every key: last, -1, 100-120, 0,5, or "
        "the tokens of a text ('What is', or text:2024 for text that reads like indices). "
        "What the last token reads before it answers, at any length.",
    ),
]
SpanOption = Annotated[
    str | None,
    in_long(
        "--span",
        metavar="KEYS",
        help="Key tokens, as --rows names rows (positions, or a text such as a needle's), "
        "whose weight each head's span statistic sums over the rows: a retrieval score, "
        "listed by heads and ranked by --top-heads N --by span.",
    ),
]
WeighOption = Annotated[
    Weighting | None,
    in_selection(
        "--weigh",
        metavar="value",
        case_sensitive=False,
        help="Multiply each weight by what its key writes through the head, weight × ‖W_O v‖ "
        "(Kobayashi et al. 2020): a sink whose value is small fades. Rows no longer sum to "
        "1; pictures get a colour scale of their own.",
    ),
]
PoolOption = Annotated[
    int | None,
    in_long(
        "--pool",
        metavar="BINS",
        help="Pool neighbouring tokens so that each map has at most BINS × BINS cells (rows "
        "averaged, columns summed: rows still sum to 1). Pictures, the page and the terminal "
        f"pool inputs longer than {AUTO_POOL} tokens by themselves.",
    ),
]
SpecialOption = Annotated[
    bool,
    in_model(
        "--special/--no-special",
        help="Keep special tokens ([CLS], <s>, …). --no-special drops their rows and columns "
        "and renormalises each row to sum to 1.",
    ),
]
WordsOption = Annotated[
    bool,
    in_model(
        "--words",
        help="Merge sub-word pieces into words: a word's row is the mean of its pieces' rows, "
        "its column the sum of their columns, so rows still sum to 1.",
    ),
]
ChatOption = Annotated[
    bool,
    in_model(
        "--chat",
        help="Read the text as one user message through the tokenizer's chat template, as an "
        "instruct model was trained to; the template's own tokens count as special.",
    ),
]
SystemOption = Annotated[
    str | None,
    in_model(
        "--system",
        metavar="TEXT",
        help="With --chat: a system message before the user's.",
    ),
]
PairOption = Annotated[
    str | None,
    in_model(
        "--pair",
        metavar="TEXT_B",
        help="Sentence B of a sentence pair for an encoder such as BERT: [CLS] TEXT [SEP] "
        "TEXT_B [SEP], with the tokenizer's own pair encoding and token types.",
    ),
]
BetweenOption = Annotated[
    str | None,
    in_selection(
        "--between",
        metavar="A-B",
        help="With --pair: only the rows of one sentence and the columns of the other (a-b: "
        "sentence A's tokens attending to B's; b-a, a-a, b-b), each row renormalised to sum to "
        "1 over the columns kept.",
    ),
]
RawPiecesOption = Annotated[
    bool,
    in_model(
        "--raw-pieces",
        help="Label tokens with the tokenizer's own pieces (##ization, Ġthe, ▁the) instead of "
        "the cleaned text.",
    ),
]
LabelPositionsOption = Annotated[
    bool,
    in_output(
        "--label-positions",
        help="Tell repeated tokens apart: a label that occurs more than once gets its position "
        "in the map (the·0 … the·3; 0 is the first token, as in csv's query_index).",
    ),
]
SeedOption = Annotated[
    int | None,
    in_stack(
        "--seed",
        metavar="SEED",
        min=0,
        max=2**63 - 1,  # what torch.manual_seed takes
        show_default="0",
        help="Seed of every weight and token embedding.",
    ),
]
ColourOption = Annotated[
    ColourChoice,
    in_output(
        "--color",
        metavar="WHEN",
        case_sensitive=False,
        help="Colour in the terminal picture. auto honours NO_COLOR and never colours a pipe; "
        "without colour, cells are shaded ·░▒▓█.",
    ),
]
# Columns a terminal picture is drawn in. Drawing time and memory grow with the width
# (99,999,999 columns ran for minutes); no terminal is wider than this.
MIN_WIDTH, MAX_WIDTH = 20, 2000
WidthOption = Annotated[
    int | None,
    in_output(
        "--width",
        metavar="COLUMNS",
        min=MIN_WIDTH,
        max=MAX_WIDTH,
        help=f"Columns to draw in, {MIN_WIDTH} to {MAX_WIDTH} (default: the terminal's width, "
        f"or $COLUMNS, or 80).",
    ),
]
AggregateOption = Annotated[
    Aggregate | None,
    in_selection(
        "--aggregate",
        "-a",
        metavar="METHOD",
        case_sensitive=False,
        help="Combine the selected maps. mean, max: over heads, a map per layer. mean-all, "
        "max-all: over layers and heads. rollout: attention rollout (Abnar & Zuidema 2020), the "
        "product of head-mean maps with the residual folded in (0.5·A + 0.5·I). flow: "
        "attention flow as maximum flow, up to 64 tokens.",
    ),
]
