"""Bars that show the listener's news (:mod:`attnviz.progress`) on a terminal or in a
notebook: a bar per long pass (what it does, done of total, time left), gone when the
work ends; and for a log, lines (:class:`Lines`). The command line draws bars where
stderr is a terminal, else writes lines; ``Extractor.circuit`` draws bars where it runs
in a terminal or a notebook, unless told not to."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
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


# A log gets a line of a long pass at most this often (and one as it ends, if it took this
# long): what it does, how far it is, and the time left at its own pace so far.
LINE_EVERY = 30.0


class Lines:
    """A listener for a log (stderr no terminal): every :data:`LINE_EVERY` seconds at
    most, a line of the pass under way with the most time left (the pass over the pairs,
    not one pair's inner passes): what it does, done of total, and the time left at its
    own pace since its first news (re-made at each line, so that a load that comes or
    goes moves it); and a line as a pass ends that ran that long."""

    def __init__(
        self,
        write: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        every: float | None = None,  # LINE_EVERY
    ) -> None:
        self.write, self.clock = write, clock
        self.every = LINE_EVERY if every is None else every
        # each pass under way: (when, done) at its first news, and (done, total) now
        self.first: dict[str, tuple[float, int]] = {}
        self.now: dict[str, tuple[int, int]] = {}
        self.news: dict[str, str] = {}
        self.said = clock()  # when the last line was written

    def __call__(self, what: str, done: int, total: int) -> None:
        now = self.clock()
        began, _ = self.first.setdefault(what, (now, done))
        if done >= total:
            for kept in (self.first, self.now, self.news):
                kept.pop(what, None)  # a pass of the same name may come again
            if now - began >= self.every:
                self._line(f"{plural(what)}: {done:,} of {total:,}, done", now)
            return
        self.now[what] = done, total
        if now - self.said >= self.every:
            longest = max(self.now, key=lambda name: self._left(name, now))
            done, total = self.now[longest]
            left = self._left(longest, now)
            pace = "" if left == 0 else f", about {left:,.0f} s left"
            news = f" · {self.news[longest]}" if longest in self.news else ""
            self._line(f"{plural(longest)}: {done:,} of {total:,}{pace}{news}", now)

    def _left(self, what: str, now: float) -> float:
        """The time ``what`` has left at its pace since its first news (0: not known)."""
        (began, first), (done, total) = self.first[what], self.now[what]
        return 0.0 if done == first else (now - began) / (done - first) * (total - done)

    def noted(self, what: str, news: str) -> None:
        self.news[what] = news

    def _line(self, text: str, now: float) -> None:
        self.said = now
        self.write(f"attnviz: {text}")
