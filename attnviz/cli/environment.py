"""The environment a command runs in: whether its streams are terminals (read once per
command, or given by a test), the console its pictures are drawn on, and what its long
passes show on stderr there (bars on a terminal, a line now and then in a log)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from attnviz.cli.app import DEBUG
from attnviz.cli.declarations import MAX_WIDTH, ColourChoice
from attnviz.errors import warn
from attnviz.progress_bars import Lines, bars

if TYPE_CHECKING:
    from attnviz.progress import Listener


@dataclass(frozen=True)
class Environment:
    """What a command needs to know about the process it runs in. The real process is
    read once per command; tests pass their own (``CliRunner.invoke(..., obj=...)``) to
    reach the terminal-only branches in-process."""

    stdout_is_terminal: bool
    stderr_is_terminal: bool

    @classmethod
    def of_process(cls) -> Environment:
        return cls(
            stdout_is_terminal=_is_terminal(sys.stdout),
            stderr_is_terminal=_is_terminal(sys.stderr),
        )


# What a command function called directly, not through the command line, writes as.
NO_TERMINAL = Environment(stdout_is_terminal=False, stderr_is_terminal=False)


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _debug(ctx: typer.Context, value: bool) -> bool:
    """``--debug`` after a command: the root's error handler reads it from the shared meta."""
    if value:
        ctx.meta[DEBUG] = True
    return value


def with_environment(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the environment it runs in as an ``environment`` argument: the one
    passed to the root command as its ``obj``, else the real process's."""
    own = inspect.signature(command, eval_str=True)
    context = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    debug = inspect.Parameter(
        "debug",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[
            bool,
            typer.Option("--debug", hidden=True, callback=_debug, help="As attnviz --debug."),
        ],
    )
    own_parameters = [p for p in own.parameters.values() if p.name != "environment"]
    parameters = [context, *own_parameters, debug]

    @functools.wraps(command)
    def with_it(ctx: typer.Context, debug: bool = False, **arguments: object) -> None:
        given = ctx.find_root().obj
        command(**arguments, environment=given or Environment.of_process())

    with_it.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_it.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_it


def _forced_colour_system() -> str:
    # rich's own detection gives up on pipes and TERM=dumb; "always" means colour regardless.
    truecolor = os.environ.get("COLORTERM", "").lower() in ("truecolor", "24bit")
    return "truecolor" if truecolor else "256"


def _unusable_size_in_environment() -> bool:
    """COLUMNS or LINES set to 0 or less: rich would draw into no columns (and print
    nothing); Python's own terminal size treats such a value as unset."""
    for name in ("COLUMNS", "LINES"):
        try:
            if int(os.environ.get(name, "1")) <= 0:
                return True
        except ValueError:
            continue
    return False


def _environment_width() -> int:
    """$COLUMNS as a number (0 where it is none)."""
    try:
        return int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        return 0


def stdout_console(colour: ColourChoice, width: int | None, environment: Environment) -> Console:
    """The console pictures are drawn on: text is never read as markup or emoji codes."""
    systems: dict[ColourChoice, Any] = {  # rich's colour systems
        ColourChoice.AUTO: "auto",
        ColourChoice.ALWAYS: _forced_colour_system(),
        ColourChoice.NEVER: None,
    }
    terminal = {  # None: rich decides (a pipe gets no colour unless FORCE_COLOR is set)
        ColourChoice.AUTO: True if environment.stdout_is_terminal else None,
        ColourChoice.ALWAYS: True,
        ColourChoice.NEVER: None,
    }
    if width is None and _unusable_size_in_environment():
        width = shutil.get_terminal_size((80, 25)).columns  # ignores COLUMNS=0, as a shell does
    if width is None and _environment_width() > MAX_WIDTH:
        warn(f"COLUMNS={os.environ['COLUMNS']} is wider than attnviz draws: drawing in {MAX_WIDTH}")
        width = MAX_WIDTH
    return Console(
        file=sys.stdout,
        width=width,
        # With both set, rich takes the width as given; the height is the terminal's
        # (or $LINES), which decides whether panels fit or the grid is drawn.
        height=shutil.get_terminal_size((80, 25)).lines if width else None,
        force_terminal=terminal[colour],
        color_system=systems[colour],
        markup=False,
        emoji=False,
        highlight=False,
    )


def uses_colour(console: Console) -> bool:
    return console.color_system is not None and not console.no_color


@contextlib.contextmanager
def passes_shown(environment: Environment) -> Iterator[Listener | None]:
    """A progress listener (:mod:`attnviz.progress`) drawing a bar per long pass on stderr
    (what it does, done of total, time left) while it runs, gone when it ends; where
    stderr is not a terminal, a line of a long pass now and then (a log gets no bars)."""
    if not environment.stderr_is_terminal:
        yield Lines(lambda line: print(line, file=sys.stderr, flush=True))
        return
    console = Console(stderr=True, markup=False, highlight=False, force_terminal=True)
    with bars(console) as listener:
        yield listener
