"""Bars that show the listener's news (:mod:`attnviz.progress`) on a terminal or in a
notebook: a bar per long pass (what it does, done of total, time left), gone when the
work ends. The command line draws them where stderr is a terminal; ``Extractor.circuit``
where it runs in a terminal or a notebook, unless told not to."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from attnviz.progress import Listener


def plural(what: str) -> str:
    """``patch``: ``patches``; ``gradient pass``: ``gradient passes``; ``edge``: ``edges``."""
    return what + ("es" if what.endswith(("s", "sh", "ch", "x")) else "s")


def shown_here() -> bool:
    """Whether a person watches this process's stderr: a terminal, or a notebook's cell
    (an IPython kernel, whose stderr is no terminal)."""
    if sys.stderr is not None and sys.stderr.isatty():
        return True
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


@contextlib.contextmanager
def bars(console: Any = None) -> Iterator[Listener]:
    """A listener drawing a bar per pass while open (on ``console``, a rich Console; by
    default stderr's)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    console = console or Console(stderr=True, markup=False, highlight=False)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    progress = Progress(*columns, TimeRemainingColumn(), console=console, transient=True)
    with progress:
        yield _Bars(progress)


class _Bars:
    """The listener :func:`bars` yields: a bar per pass, its running figure (where a pass
    notes one, :func:`attnviz.progress.note`) beside what it does."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if what not in self.tasks:
            self.tasks[what] = self.progress.add_task(plural(what), total=total)
        self.progress.update(self.tasks[what], completed=done, total=total)

    def noted(self, what: str, news: str) -> None:
        if what in self.tasks:
            self.progress.update(self.tasks[what], description=f"{plural(what)} · {news}")
