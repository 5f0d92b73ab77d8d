"""The root command and the one error path every command shares."""

from __future__ import annotations

import errno
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from attnviz import __version__
from attnviz.errors import AttnvizError, AttnvizWarning, ExitCode, describe, flags_named
from attnviz.safe_text import display_label

if TYPE_CHECKING:  # what typer's group methods take: the Context of the click it carries
    from typer._click.core import Context

# Set in the context's meta by `--debug` given after a command (`attnviz show --debug`).
DEBUG = "attnviz.debug"


def report(message: str) -> None:
    """One line on stderr. Plain print, not rich: long messages must not be wrapped. A
    message quotes what the user gave (a path, a text), which is shown, never obeyed."""
    print(f"attnviz: error: {display_label(message)}", file=sys.stderr)


def _warning_printer() -> Callable[..., None]:
    """A printer of attnviz's own warnings as one line on stderr, each said once in a
    command (two passes over a text both see it cut); any other warning as Python
    shows it."""
    said: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if not issubclass(category, AttnvizWarning):
            _python_show_warning(message, category, filename, lineno, file, line)
        elif str(message) not in said:
            said.add(str(message))
            print(f"attnviz: warning: {display_label(str(message))}", file=sys.stderr)

    return show


_python_show_warning = warnings.showwarning


def _silence_stdout() -> None:
    # The reader went away (`| head`): later writes and the interpreter's final
    # flush must not fail again, so stdout is pointed at /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (tests)
        pass
    finally:
        os.close(devnull)


@dataclass(frozen=True)
class CommandEntry:
    module: str  # where the command's function (or group of them) named like it lives
    summary: str  # the line `attnviz --help` shows for it
    subcommands: tuple[str, ...] = ()  # a group's commands (`attnviz pairs check`)


# Every command, in the order `attnviz --help` lists them. A command's module is
# imported only when the command runs (or its own help is asked for), so that
# `attnviz --help` imports none of them.
COMMANDS = {
    "show": CommandEntry(
        "attnviz.cli.show", "A heatmap per head in the terminal, or the maps as data."
    ),
    "generate": CommandEntry(
        "attnviz.cli.generate", "Let a language model write, and see what it attended to."
    ),
    "export": CommandEntry("attnviz.cli.export", "Save maps as a PNG, SVG or PDF picture."),
    "batch": CommandEntry(
        "attnviz.cli.batch", "Pictures and data for every input of a file, with a manifest."
    ),
    "render": CommandEntry(
        "attnviz.cli.render", "Draw saved maps, in the terminal or as a picture."
    ),
    "explore": CommandEntry(
        "attnviz.cli.explore", "Step through layers, heads and tokens in a full-screen app."
    ),
    "heads": CommandEntry("attnviz.cli.heads", "Statistics per head: what kind of head is this?"),
    "trace": CommandEntry(
        "attnviz.cli.trace", "Causal tracing: which layer and position an answer needs."
    ),
    "lens": CommandEntry(
        "attnviz.cli.lens", "The logit lens: what each layer would predict at each position."
    ),
    "acts": CommandEntry(
        "attnviz.cli.acts", "Activations by name: any site of any layer, head or node."
    ),
    "circuit": CommandEntry(
        "attnviz.cli.circuit", "Circuits: which paths between heads carry an answer."
    ),
    "top": CommandEntry(
        "attnviz.cli.top", "For each query token, the key tokens it attends to most."
    ),
    "diff": CommandEntry(
        "attnviz.cli.diff", "How differently two models (or two saved runs) attend."
    ),
    "needle": CommandEntry(
        "attnviz.cli.needle", "A needle-in-a-haystack sweep, and the heads that retrieve it."
    ),
    "pairs": CommandEntry(
        "attnviz.cli.pairs",
        "Make, check and split a dataset of pairs for circuits.",
        ("make", "check", "split"),
    ),
    "stats": CommandEntry(
        "attnviz.cli.stats", "Per-head statistics over a whole corpus, in bounded memory."
    ),
    "explain": CommandEntry(
        "attnviz.cli.explain", "One head's attention, step by step, with the real numbers."
    ),
    "models": CommandEntry(
        "attnviz.cli.models", "The model aliases and the models usable offline now."
    ),
}


# The environment that tells torch's OpenMP threads to wait for each other asleep.
OPENMP_ASLEEP = {"OMP_WAIT_POLICY": "PASSIVE"}
# What a user sets to choose how they wait: then attnviz leaves it to them.
_OPENMP_WAITING = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def threads_sleep_while_they_wait() -> None:
    """torch's OpenMP threads wait for each other at the end of every parallel operation,
    by default spinning; where another process holds a core, the thread on it runs only
    when the scheduler lets it, while the others spin on theirs, at each of a pass's
    thousands of small operations (a 10-pair SmolLM2 circuit ran past 21 minutes beside
    another job, 82 s on one thread). Asleep, a waiting thread gives its core back:
    ``benchmarks/threads.py`` measures it (docs/performance.md). Set for this process
    and its workers before torch is first imported, which is when OpenMP reads it; the
    thread count, and so every number's summing order, stays torch's."""
    if not any(name in os.environ for name in _OPENMP_WAITING):
        os.environ.update(OPENMP_ASLEEP)


class Terminated(SystemExit):
    """A termination signal (SIGTERM), unwinding the work like Ctrl-C; exit 128 + signal."""


def _signal_in(error: BaseException) -> BaseException | None:
    """The signal (SIGTERM, Ctrl-C) that ``error`` came from, if any: a signal that
    lands inside library code (an extension module being imported) can come out as
    another error."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, Terminated | KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _failed_output(error: OSError) -> ExitCode:
    """A reader that went away (``| head``) ends the work quietly: success. Any other
    failure to write (a full device, a closed stream) is one error line."""
    if error.errno == errno.EPIPE:
        _silence_stdout()
        return ExitCode.OK
    code, message = describe(error)
    report(message)
    return code


class AttnvizGroup(TyperGroup):
    """Finds commands in COMMANDS, loading each only when it runs; maps every exception
    to a message and an exit code; ``--debug`` shows the traceback."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, name: str) -> Any:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        from typer.main import get_command_from_info
        from typer.models import CommandInfo

        function = getattr(importlib.import_module(entry.module), name)
        if isinstance(function, typer.Typer):  # a group of commands
            from typer.main import get_group

            return get_group(function)
        return get_command_from_info(
            CommandInfo(name=name, callback=function, short_help=entry.summary),
            pretty_exceptions_short=True,
            rich_markup_mode=None,
        )

    def format_commands(self, ctx: Context, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.summary) for name, entry in COMMANDS.items()])

    def invoke(self, ctx: Context) -> Any:
        try:
            with warnings.catch_warnings(), flags_named():  # Python's printer back after
                warnings.showwarning = _warning_printer()
                return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort):
            raise
        except BaseException as error:
            if isinstance(error, SystemExit):
                raise
            signal = _signal_in(error)
            if isinstance(signal, Terminated):  # the signal's exit, not an error message
                raise Terminated(signal.code) from None
            if signal is not None and not isinstance(error, AttnvizError):
                error = signal  # Ctrl-C: interrupted, 130 (attnviz's own errors say more)
            if isinstance(error, OSError) and error.errno == errno.EPIPE:
                raise typer.Exit(_failed_output(error)) from None
            code, message = describe(error)
            if ctx.params.get("debug") or ctx.meta.get(DEBUG):
                traceback.print_exception(error)  # the traceback, and still the documented code
            report(message)
            raise typer.Exit(code) from None

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        threads_sleep_while_they_wait()
        try:
            result = super().main(*args, **{**kwargs, "standalone_mode": False})
        except typer.TyperException as error:
            hint = (
                f" (see '{context.command_path} --help')"
                if (context := getattr(error, "ctx", None))
                else ""
            )
            # typer checks choices with pydantic, whose message begins "Value error, ".
            message = error.format_message().replace(": Value error, ", ": ", 1)
            report(f"{message}{hint}")
            result = error.exit_code
        except typer.Abort:
            report("interrupted")
            result = ExitCode.INTERRUPTED
        except OSError as error:  # writing --help or --version: before any command runs
            result = _failed_output(error)
        code = result if isinstance(result, int) else ExitCode.OK
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=AttnvizGroup,
    name="attnviz",
    help="See what every attention head attends to, in the terminal.",
    invoke_without_command=True,  # bare `attnviz` prints the help (see root)
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    # Plain help: typer's rich help imports rich.markdown and markdown-it, which would
    # double the time `attnviz --help` takes.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"attnviz {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", envvar="ATTNVIZ_DEBUG", help="Show the full traceback when something fails."
        ),
    ] = False,
) -> None:
    """See what every attention head attends to, in the terminal."""
    if ctx.invoked_subcommand is None:  # bare `attnviz`: the help, and success
        typer.echo(ctx.get_help())
        raise typer.Exit()
