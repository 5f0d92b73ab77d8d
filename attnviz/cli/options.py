"""Options shared by several commands, and the consoles they write to."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from attnviz.core import BUILTIN, Mode
from attnviz.errors import UsageError

if TYPE_CHECKING:
    from attnviz.builtin import BuiltinConfig
    from attnviz.maps import AttentionMaps
    from attnviz.pretrained import LoadOptions
    from attnviz.render.image import Style, View

T = TypeVar("T")
SELECTION_PANEL = "Layers and heads"
MODEL_PANEL = "Pretrained models"
STACK_PANEL = "Built-in stack (without --model)"
OUTPUT_PANEL = "Output"


class ColourChoice(StrEnum):
    AUTO = "auto"  # colour when stdout is a terminal, unless NO_COLOR is set
    ALWAYS = "always"
    NEVER = "never"


class Dtype(StrEnum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"


DtypeOption = Annotated[
    Dtype,
    typer.Option(
        "--dtype",
        case_sensitive=False,
        rich_help_panel=OUTPUT_PANEL,
        help="How stored weights are written: float16 halves the size of json and npz data.",
    ),
]


class Projections(StrEnum):  # a StrEnum: BuiltinConfig takes it as the plain string
    LEARNED = "learned"
    IDENTITY = "identity"


TextArgument = Annotated[
    str, typer.Argument(help="The text to look at, or - to read it from standard input.")
]
SavedArgument = Annotated[
    str,
    typer.Argument(
        help="Saved maps: a json, ndjson or npz file written by attnviz, or - for stdin."
    ),
]
ModeOption = Annotated[
    Mode | None,
    typer.Option(
        "--mode",
        "-m",
        case_sensitive=False,
        show_default="the model's own: self; masked for a decoder; cross for an "
        "encoder-decoder given --target",
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
ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        rich_help_panel=MODEL_PANEL,
        help="builtin (the seeded stack), an alias (see attnviz models), a directory saved with "
        "save_pretrained, or a Hugging Face id from the local cache.",
    ),
]
DownloadOption = Annotated[
    bool,
    typer.Option(
        "--download",
        rich_help_panel=MODEL_PANEL,
        help="Fetch a model missing from the local cache (needs network; HF_HUB_OFFLINE=1 wins).",
    ),
]
TrustRemoteCodeOption = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        rich_help_panel=MODEL_PANEL,
        help="Run Python code that comes with the model. Off unless you trust its author.",
    ),
]
AllowPickleOption = Annotated[
    bool,
    typer.Option(
        "--allow-pickle",
        rich_help_panel=MODEL_PANEL,
        help="Accept pickle (.bin) weights, which can run code when loaded; safetensors only "
        "by default.",
    ),
]
SpecialOption = Annotated[
    bool,
    typer.Option(
        "--special/--no-special",
        rich_help_panel=MODEL_PANEL,
        help="Keep special tokens ([CLS], <s>, …). --no-special drops their rows and columns "
        "and renormalises each row to sum to 1.",
    ),
]
WordsOption = Annotated[
    bool,
    typer.Option(
        "--words",
        rich_help_panel=MODEL_PANEL,
        help="Merge sub-word pieces into words: a word's row is the mean of its pieces' rows, "
        "its column the sum of their columns, so rows still sum to 1.",
    ),
]
VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose",
        rich_help_panel=MODEL_PANEL,
        help="Show transformers' own warnings and progress bars.",
    ),
]
LayersOption = Annotated[
    int | None,
    typer.Option(
        "--layers",
        min=1,
        max=64,
        show_default="2",
        rich_help_panel=STACK_PANEL,
        help="Number of layers.",
    ),
]
HeadsOption = Annotated[
    int | None,
    typer.Option(
        "--heads",
        min=1,
        max=64,
        show_default="4",
        rich_help_panel=STACK_PANEL,
        help="Attention heads per layer.",
    ),
]
DModelOption = Annotated[
    int | None,
    typer.Option(
        "--d-model",
        min=1,
        max=4096,
        show_default="64",
        rich_help_panel=STACK_PANEL,
        help="Width of the token vectors; a multiple of --heads with learned projections.",
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        "--seed",
        show_default="0",
        rich_help_panel=STACK_PANEL,
        help="Seed of every weight and token embedding.",
    ),
]
PositionsOption = Annotated[
    bool | None,
    typer.Option(
        "--positions/--no-positions",
        show_default="positions",
        rich_help_panel=STACK_PANEL,
        help="Add sinusoidal positions. Without them attention ignores word order: "
        "shuffling the words shuffles the maps the same way.",
    ),
]
ProjectionsOption = Annotated[
    Projections | None,
    typer.Option(
        "--projections",
        case_sensitive=False,
        show_default="learned",
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


@dataclass(frozen=True)
class Extraction:
    """What every command that reads a text needs: the model, the mode, the selection."""

    model: str
    mode: Mode | None
    layer: str
    head: str
    config: BuiltinConfig | None
    lowercase: bool
    special: bool
    words: bool
    load_options: LoadOptions

    def prepare(self) -> None:
        """Load a pretrained model now, under a spinner, before any output starts."""
        if self.model == BUILTIN:
            return
        from attnviz.pretrained import load

        console = Console(stderr=True, markup=False, highlight=False)
        if not console.is_terminal:
            load(self.model, self.load_options)
            return
        with console.status(f"loading {self.model} …"):
            load(self.model, self.load_options)

    def many(self, items: list[Any]) -> list[AttentionMaps]:
        """The maps of several inputs (anything with .text and .target); pretrained models
        run them in one padded forward pass, the built-in stack one by one."""
        if self.model == BUILTIN:
            return [self(item.text, item.target) for item in items]
        from attnviz.pretrained import extract_batch, load

        if not items:
            return []
        return extract_batch(
            load(self.model, self.load_options),
            [(item.text, item.target) for item in items],
            mode=None if self.mode is None else self.mode.value,
            layers=self.layer,
            heads=self.head,
            special=self.special,
            words=self.words,
        )

    def __call__(self, text: str, target: str | None = None) -> AttentionMaps:
        from attnviz.core import extract

        return extract(
            text,
            model=self.model,
            mode=self.mode,
            target=target,
            layers=self.layer,
            heads=self.head,
            config=self.config,
            lowercase=self.lowercase,
            special=self.special,
            words=self.words,
            load_options=self.load_options,
        )


@dataclass(frozen=True)
class ModelSettings:
    """The pretrained-model and built-in-stack options, as every model command takes them."""

    special: bool = True
    words: bool = False
    download: bool = False
    trust_remote_code: bool = False
    allow_pickle: bool = False
    verbose: bool = False
    layers: int | None = None
    heads: int | None = None
    d_model: int | None = None
    seed: int | None = None
    positions: bool | None = None
    projections: Projections | None = None
    keep_case: bool = False

    def stack(self) -> dict[str, object]:
        """The built-in stack options that were given."""
        stack = {"layers": self.layers, "heads": self.heads, "d_model": self.d_model}
        stack |= {"seed": self.seed, "positions": self.positions, "projections": self.projections}
        return {name: value for name, value in stack.items() if value is not None}

    def without_stack(self) -> ModelSettings:
        return replace(self, **dict.fromkeys(self.stack(), None), keep_case=False)


DEFAULT_SETTINGS = ModelSettings()

# The command-line spelling of each ModelSettings field, in the order --help lists them.
_SETTINGS_OPTIONS = {
    "special": (SpecialOption, True),
    "words": (WordsOption, False),
    "download": (DownloadOption, False),
    "trust_remote_code": (TrustRemoteCodeOption, False),
    "allow_pickle": (AllowPickleOption, False),
    "verbose": (VerboseOption, False),
    "layers": (LayersOption, None),
    "heads": (HeadsOption, None),
    "d_model": (DModelOption, None),
    "seed": (SeedOption, None),
    "positions": (PositionsOption, None),
    "projections": (ProjectionsOption, None),
    "keep_case": (KeepCaseOption, False),
}


def model_settings(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the model and built-in-stack options, passed to it as one
    ``settings: ModelSettings`` argument, so that each command lists only its own."""
    own = inspect.signature(command, eval_str=True)
    parameters = [p for p in own.parameters.values() if p.name != "settings"]
    parameters += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        for name, (hint, default) in _SETTINGS_OPTIONS.items()
    ]

    @functools.wraps(command)
    def with_settings(**arguments: object) -> None:
        given = {name: arguments.pop(name) for name in _SETTINGS_OPTIONS}
        command(**arguments, settings=ModelSettings(**given))

    with_settings.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_settings.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_settings


def extraction(
    *, model: str, mode: Mode | None, layer: str, head: str, settings: ModelSettings
) -> Extraction:
    """Check the model options together and bundle them."""
    from attnviz.builtin import BuiltinConfig
    from attnviz.pretrained import LoadOptions

    given = settings.stack()
    if model != BUILTIN and (given or settings.keep_case):
        raise UsageError(
            "--layers, --heads, --d-model, --seed, --positions, --projections and --keep-case "
            "configure the built-in stack; they do not apply to --model"
        )
    try:
        config = BuiltinConfig(**given) if given else None
    except ValueError as error:
        raise UsageError(str(error)) from None
    return Extraction(
        model=model,
        mode=mode,
        layer=layer,
        head=head,
        config=config,
        lowercase=not settings.keep_case,
        special=settings.special,
        words=settings.words,
        load_options=LoadOptions(
            download=settings.download,
            trust_remote_code=settings.trust_remote_code,
            allow_pickle=settings.allow_pickle,
            verbose=settings.verbose,
        ),
    )


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


def only_one(items: Iterable[T]) -> T:
    """The one input a command reads; several (lines on stdin, records in a file) are refused."""
    stream = iter(items)
    first = next(stream)
    if next(stream, None) is not None:
        raise UsageError("this command reads one input, but several were given")
    return first


def write_stdout(content: str) -> None:
    from attnviz.io import write_text

    write_text(content, "-")


def save_picture(maps: AttentionMaps, view: View, picture: str, style: Style, output: str) -> None:
    """Write the one picture a view makes of ``maps``; a view that makes several is refused."""
    from attnviz.io import open_output
    from attnviz.render.image import View, picture_files

    layer_count, head_count = maps.weights.shape[:2]
    if view is View.HEAD and (layer_count, head_count) != (1, 1):
        raise UsageError(
            f"--view head draws one map, but {layer_count} layers × {head_count} heads are "
            "selected: pick one with --layer and --head, or use --view layer or model"
        )
    if view is View.LAYER and layer_count != 1:
        raise UsageError(
            f"--view layer draws one layer, but {layer_count} are selected: pick one with --layer"
        )
    ((_, data),) = picture_files(maps, view, picture, style)
    with open_output(output, binary=True) as out:
        out.write(data)


def uses_colour(console: Console) -> bool:
    return console.color_system is not None and not console.no_color


def draw(
    stream: Iterable[AttentionMaps], *, colour: ColourChoice, width: int | None, values: bool
) -> None:
    """Each input's maps as terminal pictures, one after another, as they come."""
    from attnviz.render.terminal import render

    console = stdout_console(colour, width)
    for number, maps in enumerate(stream):
        if number:
            console.print()
        console.print(
            render(maps, width=console.width, use_colour=uses_colour(console), values=values)
        )
