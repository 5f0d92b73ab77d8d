"""Rendering in worker processes while the model reads the next chunk."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from typing import Any

from attnviz.batch.inputs import BatchInput
from attnviz.batch.manifest import FileDigest
from attnviz.batch.writing import Task, render_task
from attnviz.errors import AttnvizError
from attnviz.render.image import Painter

# A worker process's own painter: each worker renders with the canvases it built.
_worker_painter: Painter | None = None


def _start_worker() -> None:
    import signal

    global _worker_painter
    # Ctrl-C reaches every process of the group; the main process alone handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    _worker_painter = Painter()
    # Import matplotlib now, while the main process is still importing torch.
    import matplotlib.figure  # noqa: F401


def _die_with_parent() -> None:
    """On Linux, ask the kernel to end this worker when the batch process ends, however
    it ends (kill -9 included), rather than leave it rendering for nobody."""
    import ctypes
    import multiprocessing
    import signal
    import sys

    parent_process = multiprocessing.parent_process()
    if not sys.platform.startswith("linux") or parent_process is None:
        return
    parent = parent_process.pid
    set_parent_death_signal = 1  # PR_SET_PDEATHSIG, from <linux/prctl.h>
    try:
        ctypes.CDLL(None, use_errno=True).prctl(set_parent_death_signal, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _render_in_worker(task: Task) -> tuple[BatchInput, dict[str, FileDigest] | Exception]:
    assert _worker_painter is not None, "the pool's initializer makes the painter"
    return render_task(task, _worker_painter)


class WorkerDied(AttnvizError):
    """The worker process rendering an input ended without an answer (killed, or out of
    memory): that input fails, the batch goes on."""


class RenderPool:
    """Renders in this process (jobs 1) or in a pool of worker processes, in input order.

    If a worker dies, the inputs it held fail and the rest are rendered here.
    """

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.painter = Painter()
        self.pool: Any = None
        self.queue: deque[tuple[BatchInput, Any]] = deque()  # (input, future or result)

    def __enter__(self) -> RenderPool:
        if self.jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn, not fork: a fork of a process running torch's threads can deadlock.
            self.pool = ProcessPoolExecutor(
                max_workers=self.jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
            )
            self.pool.submit(int)  # start the workers now, while the first inputs are extracted
            # torch's thread count is left alone: with fewer threads its sums run in
            # another order, and the same text must give the same numbers whatever --jobs.
        return self

    def submit(self, task: Task) -> None:
        from concurrent.futures.process import BrokenProcessPool

        item = task[0]
        if self.pool is not None:
            try:
                self.queue.append((item, self.pool.submit(_render_in_worker, task)))
                return
            except BrokenProcessPool:
                self._stop_pool()
        self.queue.append((item, render_task(task, self.painter)))

    def completed(
        self, wait: bool
    ) -> Iterator[tuple[BatchInput, dict[str, FileDigest] | Exception]]:
        """Finished results in input order; with ``wait``, all of them."""
        from concurrent.futures import Future
        from concurrent.futures.process import BrokenProcessPool

        while self.queue:
            item, head = self.queue[0]
            if isinstance(head, Future):
                if not wait and not head.done() and len(self.queue) <= 4 * self.jobs:
                    return  # keep the workers busy while the next chunk is extracted
                try:
                    head = head.result()
                except BrokenProcessPool:
                    self._stop_pool()
                    head = (item, WorkerDied("the worker process rendering it died"))
            self.queue.popleft()
            yield head

    def _stop_pool(self) -> None:
        """A broken pool takes no more work: what comes next is rendered here."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
