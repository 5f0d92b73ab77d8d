"""The same batch and corpus statistics on a Ray cluster (``--engine ray``).

Ray Data carries the inputs; an actor pool holds one model per worker, built
from the Extractor spec (a worker loads the model once); batches of inputs flow
through ``map_batches``. For ``batch`` the workers write the files into the
shared output folder with the names and atomic writes of the local engine, and
return the manifest records, which the driver writes: an input whose task is
retried (a worker died) is written again with the same bytes and recorded once.
For ``stats`` each batch returns its partial statistics, merged by the driver.

Ray is an optional extra (``attnviz[ray]``), imported only here and in
:mod:`attnviz.circuits.distributed`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from attnviz.analysis.corpus import CorpusStatistics
from attnviz.batch.inputs import BatchInput
from attnviz.batch.manifest import Record
from attnviz.batch.run import (
    Reader,
    check_failures,
    pending_chunks,
    record_done,
    records_of,
    start_batch,
)
from attnviz.errors import AttnvizError, AttnvizWarning, UsageError, warn
from attnviz.inputs import Input
from attnviz.render.image import Painter

if TYPE_CHECKING:
    from attnviz.analysis.corpus import CorpusStatistics, CorpusWork
    from attnviz.batch.inputs import BatchInput
    from attnviz.batch.run import BatchWork, Tally
    from attnviz.batch.writing import Outputs
    from attnviz.loading import ExtractorSpec
    from attnviz.request import Request


@dataclass(frozen=True)
class Workers:
    """How many Ray workers hold the model, and what each one reserves: ``cpus`` CPUs, on
    which torch runs that many threads (so that Ray never puts more threads on a node
    than it has CPUs), and ``gpus`` GPUs."""

    count: int = 1
    cpus: int = 1
    gpus: float = 0.0

    def map_options(self) -> dict[str, Any]:
        from ray.data import ActorPoolStrategy

        # As many workers as the cluster has room for, up to ``count``; Ray Data starts a
        # worker that dies again and retries its batch: nothing is lost.
        pool = ActorPoolStrategy(min_size=1, max_size=self.count, initial_size=self.count)
        return {"compute": pool, "num_cpus": self.cpus, "num_gpus": self.gpus}


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray for the work inside: joins the cluster at ``address`` (by default Ray's
    RAY_ADDRESS, which a Ray job's command gets) or starts a local Ray of its own (all
    this machine's CPUs), and afterwards disconnects (a local Ray stops). A Ray already
    started in this process (a notebook's, a test's) is used and left running.

    Meanwhile stdout goes to stderr: Ray's driver prints its notices (a worker died,
    its task will be retried) to stdout, which carries attnviz's data, and one can come
    after the work is done, so the session ends, and Ray's listener with it, before
    stdout is stdout again."""
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'attnviz[ray]'") from None
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        _check_reachable(address)
    ours = not ray.is_initialized()
    if ours:
        _start(ray, address)
    with contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        finally:
            if ours:
                with _silenced():
                    ray.shutdown()


def _start(ray: Any, address: str | None) -> None:
    # Ray's own C++ logs and notices go to stderr, where attnviz keeps one line per event.
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        with _silenced(), _own_sigterm():
            ray.init(
                # "local": a new Ray, as documented, never the one that the last `ray start`
                # here recorded in /tmp/ray, which Ray would try for minutes if it has ended.
                address=address or "local",
                include_dashboard=False,
                log_to_driver=False,
                logging_level="ERROR",
            )
    except Exception as error:  # Ray raises ConnectionError, RuntimeError, ValueError, …
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if _refused_for_token(error):
            first = (
                "it asks for a token: set RAY_AUTH_MODE=token, with the cluster's token in"
                " ~/.ray/auth_token or RAY_AUTH_TOKEN (ray get-auth-token on the head node)"
            )
        elif address == "auto" and "Could not find any running Ray" in first:
            first = (  # Ray's own words name its --address flag, not attnviz's
                "no Ray is running on this machine: start one (ray start --head), give a"
                " cluster's host:port, or leave out --ray-address for a Ray of this command's own"
            )
        raise AttnvizError(f"cannot reach {where}: {first}") from None


@contextlib.contextmanager
def _own_sigterm() -> Iterator[None]:
    """SIGTERM stays attnviz's: ray.init puts in a handler that exits with status 15, where
    attnviz unwinds the work (files whole, manifest closed, Ray shut down) and exits 143."""
    import signal
    import threading

    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)


def _refused_for_token(error: BaseException | None) -> bool:
    """Whether the cluster turned the driver away for want of its token. Ray (2.59 on)
    starts a cluster with token authentication, yet a driver given an address sends no
    token unless RAY_AUTH_MODE=token; the reason is only in the text of the error that
    Ray's "Failed to connect" wraps."""
    while error is not None:
        if "InvalidAuthToken" in str(error) or type(error).__name__ == "AuthenticationError":
            return True
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """Nothing reaches stdout or stderr meanwhile: neither Python's writes nor those of
    Ray's C++ core on the process's own descriptors (it names the log level it read from
    the environment, a line on every run)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {descriptor: os.dup(descriptor) for descriptor in (1, 2)}
    python_streams = (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    )
    with open(os.devnull, "w") as sink, python_streams[0], python_streams[1]:
        try:
            for descriptor in saved:
                os.dup2(sink.fileno(), descriptor)
            yield
        finally:
            for descriptor, copy in saved.items():
                os.dup2(copy, descriptor)
                os.close(copy)


def _check_reachable(address: str) -> None:
    """A cluster address (host:port) that takes no connection is refused at once: Ray
    itself retries for minutes."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise AttnvizError(
            f"cannot reach the Ray cluster at {address}: {error.strerror or error}"
        ) from None


def quiet_progress() -> None:
    """Ray Data's own progress bars and notices would interleave with attnviz's progress."""
    import logging

    from ray.data import DataContext

    context = DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)


class BatchWorker:
    """One worker of a batch: a model and a painter, kept for every batch it is given."""

    def __init__(
        self,
        spec: ExtractorSpec,
        request: Request,
        outputs: Outputs,
        threads: int,
        batch_size: int,
    ) -> None:
        use_threads(threads)
        self.reader = Reader(spec.load(), request)
        self.outputs = outputs
        self.batch_size = batch_size
        self.painter = Painter()

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[str]]:
        (listed,) = batch["task"]  # one task: a JSON list of [input, pending]
        pairs = json.loads(listed)
        inputs = [BatchInput(**fields) for fields, _ in pairs]
        pending = {fields["index"] for fields, wanted in pairs if wanted}
        with warnings_kept() as said:
            work = records_of(
                inputs, pending, self.reader, self.outputs, self.painter, self.batch_size
            )
            records = [json.dumps(record.to_dict()) for record in work]
        # A column per row: the task's warnings ride on its first record.
        return {"record": records, "warnings": [json.dumps(said)] + ["[]"] * (len(records) - 1)}


@contextlib.contextmanager
def warnings_kept() -> Iterator[list[str]]:
    """attnviz's warnings in a worker (a text cut to the model's length), kept for the
    driver to say: a worker's stderr is not the user's."""
    import warnings

    said: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AttnvizWarning)
        yield said
    said.extend(str(w.message) for w in caught if issubclass(w.category, AttnvizWarning))


def say_task_warnings(warnings_of_a_task: str) -> None:
    for message in json.loads(warnings_of_a_task):
        warn(message)


def use_threads(threads: int) -> None:
    """Torch runs as many threads as the worker holds CPUs. (A worker process is
    attnviz's own.) Torch sums in another order with another thread count: a worker's
    files equal, byte for byte, a local run's with the same count of torch threads."""
    import torch

    torch.set_num_threads(threads)


def _tasks_of(items: Sequence[Any], batch_size: int, workers: Workers) -> Any:
    """The items as a Ray dataset of one row per task, each a JSON list of inputs: a task
    is several of the local engine's model batches, cut the same way (a task costs Ray
    tens of milliseconds), yet there are at least four tasks per worker, so that the
    work spreads and the progress moves."""
    import ray.data

    batches = min(_TASK_INPUTS // batch_size, len(items) // (batch_size * workers.count * 4))
    size = batch_size * max(1, batches)
    rows = [
        {"task": json.dumps(items[start : start + size])} for start in range(0, len(items), size)
    ]
    return ray.data.from_items(rows, override_num_blocks=len(rows))


_TASK_INPUTS = 64


def run_batch(work: BatchWork, workers: Workers) -> Tally:
    """As :func:`attnviz.batch.run_batch`, with the work done by Ray workers."""
    quiet_progress()
    inputs, progress, tally, batch_size = work.inputs, work.progress, work.tally, work.batch_size
    pending, manifest = start_batch(work)
    done = tally.skipped
    progress(done, len(inputs))
    finished = False
    try:
        if pending:
            chunks = pending_chunks(inputs, pending, batch_size)
            listed = [[asdict(item), item.index in pending] for item in chunks]
            tasks = _tasks_of(listed, batch_size, workers)
            arguments = {"spec": work.spec, "request": work.request, "outputs": work.outputs}
            results = tasks.map_batches(
                BatchWorker,
                fn_constructor_kwargs=arguments
                | {"threads": workers.cpus, "batch_size": batch_size},
                batch_size=1,
                **workers.map_options(),
            )
            seen: set[int] = set()
            for row in results.iter_rows():
                say_task_warnings(row["warnings"])
                record = Record(**json.loads(row["record"]))
                if record.index in seen:  # a retried batch: recorded once
                    continue
                seen.add(record.index)
                record_done(record, manifest, tally.records)
                done += 1
                progress(done, len(inputs))
        finished = True
    finally:
        manifest.close(finished=finished)
    check_failures(tally.records, len(inputs), work.plan.manifest)
    return tally


class StatisticsWorker:
    """One worker of ``stats``: a model; each batch gives back its partial statistics."""

    def __init__(
        self, spec: ExtractorSpec, request: Request, threads: int, batch_size: int
    ) -> None:
        use_threads(threads)
        self.extractor = spec.load()
        self.request = request
        self.batch_size = batch_size

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        (listed,) = batch["task"]  # one task: a JSON list of [line, input's fields]
        items = [(line, Input(**fields)) for line, fields in json.loads(listed)]
        partial = CorpusStatistics()
        with warnings_kept() as said:
            for _ in partial.add_corpus(self.extractor, items, self.request, self.batch_size):
                pass
        # between attnviz's own processes
        return {"partial": [pickle.dumps(partial)], "warnings": [json.dumps(said)]}


def corpus_statistics(work: CorpusWork, workers: Workers) -> CorpusStatistics:
    """Per-head statistics of every item, computed by Ray workers and merged here;
    ``progress`` is told how many inputs are merged, after each task."""
    quiet_progress()
    corpus = CorpusStatistics()
    listed = [[line, asdict(given)] for line, given in work.lines]
    if not listed:
        return corpus
    constructor = {"spec": work.spec, "request": work.request, "threads": workers.cpus}
    results = _tasks_of(listed, work.batch_size, workers).map_batches(
        StatisticsWorker,
        fn_constructor_kwargs=constructor | {"batch_size": work.batch_size},
        batch_size=1,
        **workers.map_options(),
    )
    for row in results.iter_rows():
        say_task_warnings(row["warnings"])
        corpus.merge(pickle.loads(row["partial"]))
        work.progress(corpus.inputs)
    return corpus
