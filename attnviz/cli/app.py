"""The root command and the one error path every command shares."""

from __future__ import annotations

import errno
import os
import sys
import warnings
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from attnviz.errors import AttnvizWarning, ExitCode, describe


def report(message: str) -> None:
    """One line on stderr. Plain print, not rich: long messages must not be wrapped."""
    print(f"attnviz: error: {message}", file=sys.stderr)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """attnviz's own warnings as one line on stderr; any other warning as Python shows it."""
    if issubclass(category, AttnvizWarning):
        print(f"attnviz: warning: {message}", file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


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


class AttnvizGroup(TyperGroup):
    """Maps every exception to a message and an exit code; ``--debug`` shows the traceback."""

    def invoke(self, ctx: typer.Context) -> Any:
        warnings.showwarning = _show_warning
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort):
            raise
        except BaseException as error:
            if isinstance(error, SystemExit) or ctx.params.get("debug"):
                raise
            if isinstance(error, BrokenPipeError) or (
                isinstance(error, OSError) and error.errno == errno.EPIPE
            ):
                _silence_stdout()
                raise typer.Exit(ExitCode.OK) from None
            code, message = describe(error)
            report(message)
            raise typer.Exit(code) from None

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except typer.TyperException as error:
            hint = (
                f" (see '{error.ctx.command_path} --help')" if getattr(error, "ctx", None) else ""
            )
            report(f"{error.format_message()}{hint}")
            result = error.exit_code
        except typer.Abort:
            report("interrupted")
            result = ExitCode.INTERRUPTED
        code = result if isinstance(result, int) else ExitCode.OK
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=AttnvizGroup,
    name="attnviz",
    help="See what every attention head attends to, in the terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from attnviz import __version__

        typer.echo(f"attnviz {__version__}")
        raise typer.Exit()


@app.callback()
def root(
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
