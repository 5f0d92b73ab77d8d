"""How far a long pass has got, for whoever asked to be told.

``Extractor.run(..., progress=listener)`` hands a listener to the passes of one read: the
exact sweeps (a forward pass per batch of changes: ablations, patches, traces, knockouts)
and the gradient passes (each layer forward, then back) call :func:`advance` as they go,
and the listener decides what to show (the command line draws a bar on a terminal).
The listener travels in a context variable set around each synchronous read, as a
``with torch.no_grad()`` does, so that no pass needs an argument for it; outside a read,
or with no listener, :func:`advance` does nothing. Standard library only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

# (what, done, total): "ablation", 64, 270
Listener = Callable[[str, int, int], None]

# Told once a long pass's first part is done: (seconds it took, steps done, steps in all);
# it says, before the rest, what will take over LONG_REST seconds.
FirstPart = Callable[[float, int, int], None]
LONG_REST = 30.0

_LISTENER: ContextVar[Listener | None] = ContextVar("attnviz_progress", default=None)


@contextlib.contextmanager
def reporting(listener: Listener | None) -> Iterator[None]:
    """While open, :func:`advance` tells ``listener`` (None: nobody)."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def advance(what: str, done: int, total: int) -> None:
    """``done`` of ``total`` steps of ``what`` are finished."""
    listener = _LISTENER.get()
    if listener is not None:
        listener(what, done, total)


def note(what: str, news: str) -> None:
    """A running figure of the pass ``what`` (an optimiser's loss), for a listener that
    shows one: one with a ``noted(what, news)`` method (the bars); others are not told."""
    noted = getattr(_LISTENER.get(), "noted", None)
    if noted is not None:
        noted(what, news)


def listened() -> bool:
    """Whether anyone is told: a pass skips what it would measure only for the telling."""
    return _LISTENER.get() is not None
