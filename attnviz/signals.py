"""Ctrl-C and SIGTERM held off for a moment, then delivered (stdlib only)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = (signal.SIGINT, signal.SIGTERM)  # both unwind the work: KeyboardInterrupt, SystemExit


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM that come meanwhile wait until the block ends, and then go to
    the handlers there were. For steps that must not be cut in two (a manifest line and
    the tally), and for code where a handler's exception would not unwind: torch's
    import runs Python called from C++, where it aborts the process ("terminate called
    after throwing ... error_already_set").

    The handlers are swapped, not the signal mask: a signal goes to any thread that
    does not block it, and Python runs its handler in the main thread regardless."""
    previous = {number: signal.getsignal(number) for number in HELD}
    # Signals are the main thread's; a handler Python did not set could not be put back.
    if None in previous.values() or threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    for number in HELD:
        signal.signal(number, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if caught:  # delivered now, to the handler there was
            signal.raise_signal(caught[0])
