"""Options shared by several commands, and the consoles they write to."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

from attnviz.core import Mode

SELECTION_PANEL = "Layers and heads"
STACK_PANEL = "Built-in stack"
OUTPUT_PANEL = "Output"


class ColourChoice(StrEnum):
    AUTO = "auto"  # colour when stdout is a terminal, unless NO_COLOR is set
    ALWAYS = "always"
    NEVER = "never"


class Projections(StrEnum):
    LEARNED = "learned"
    IDENTITY = "identity"


TextArgument = Annotated[
    str, typer.Argument(help="The text to look at, or - to read it from standard input.")
]
ModeOption = Annotated[
    Mode,
    typer.Option(
        "--mode",
        "-m",
        case_sensitive=False,
        help="self: every token sees every token. masked: causal, a token sees itself and "
        "earlier tokens. cross: --target tokens (rows) attend over TEXT tokens (columns).",
    ),
]
TargetOption = Annotated[
    str | None,
    typer.Option("--target", "-t", help="Cross mode: the text whose tokens are the queries."),
]
LayerOption = Annotated[
    str,
    typer.Option(
        "--layer",
        "-l",
        rich_help_panel=SELECTION_PANEL,
        help="Layers to show: an index, a list (0,2), a range (0-2), all; negative counts from "
        "the end.",
    ),
]
HeadOption = Annotated[
    str,
    typer.Option(
        "--head", rich_help_panel=SELECTION_PANEL, help="Heads to show, written like --layer."
    ),
]
LayersOption = Annotated[
    int,
    typer.Option("--layers", min=1, max=64, rich_help_panel=STACK_PANEL, help="Number of layers."),
]
HeadsOption = Annotated[
    int,
    typer.Option(
        "--heads", min=1, max=64, rich_help_panel=STACK_PANEL, help="Attention heads per layer."
    ),
]
DModelOption = Annotated[
    int,
    typer.Option(
        "--d-model",
        min=1,
        max=4096,
        rich_help_panel=STACK_PANEL,
        help="Width of the token vectors; a multiple of --heads with learned projections.",
    ),
]
SeedOption = Annotated[
    int,
    typer.Option(
        "--seed", rich_help_panel=STACK_PANEL, help="Seed of every weight and token embedding."
    ),
]
PositionsOption = Annotated[
    bool,
    typer.Option(
        "--positions/--no-positions",
        rich_help_panel=STACK_PANEL,
        help="Add sinusoidal positions. Without them attention ignores word order: "
        "shuffling the words shuffles the maps the same way.",
    ),
]
ProjectionsOption = Annotated[
    Projections,
    typer.Option(
        "--projections",
        case_sensitive=False,
        rich_help_panel=STACK_PANEL,
        help="learned: W_Q, W_K, W_V per head. identity: Q = K = V = X, the plain attention in "
        "which a word attends most to itself and its repeats.",
    ),
]
KeepCaseOption = Annotated[
    bool,
    typer.Option("--keep-case", rich_help_panel=STACK_PANEL, help="Do not case-fold the tokens."),
]
ColourOption = Annotated[
    ColourChoice,
    typer.Option(
        "--color",
        case_sensitive=False,
        rich_help_panel=OUTPUT_PANEL,
        help="Colour in the terminal picture. auto honours NO_COLOR and never colours a pipe; "
        "without colour, cells are shaded ·░▒▓█.",
    ),
]
WidthOption = Annotated[
    int | None,
    typer.Option(
        "--width",
        min=20,
        rich_help_panel=OUTPUT_PANEL,
        help="Columns to draw in (default: the terminal's width, or $COLUMNS, or 80).",
    ),
]


def _forced_colour_system() -> str:
    # rich's own detection gives up on pipes and TERM=dumb; "always" means colour regardless.
    truecolor = os.environ.get("COLORTERM", "").lower() in ("truecolor", "24bit")
    return "truecolor" if truecolor else "256"


def stdout_console(colour: ColourChoice, width: int | None) -> Console:
    """The console pictures are drawn on: text is never read as markup or emoji codes."""
    systems = {
        ColourChoice.AUTO: "auto",
        ColourChoice.ALWAYS: _forced_colour_system(),
        ColourChoice.NEVER: None,
    }
    return Console(
        file=sys.stdout,
        width=width,
        height=25 if width else None,  # with both set, rich takes the width as given
        force_terminal=True if colour is ColourChoice.ALWAYS else None,
        color_system=systems[colour],
        markup=False,
        emoji=False,
        highlight=False,
    )


def uses_colour(console: Console) -> bool:
    return console.color_system is not None and not console.no_color
