"""Where ``batch``, ``stats`` and ``circuit`` do their work: in this process (:class:`Local`) or on
Ray workers (:class:`Ray`), behind one small interface (:class:`Engine`).

Both engines take the same things (what to load, an :class:`~attnviz.loading.ExtractorSpec`;
what to read from it, a :class:`~attnviz.request.Request`) and give back the same
things, so that a command never asks which one runs: a request through :meth:`Engine.run`
gives what :meth:`~attnviz.extractor.Extractor.run` gives. The batch's files are byte for
byte the same on either (tests/test_ray.py holds them to it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from attnviz import distributed
from attnviz.analysis.corpus import CorpusStatistics
from attnviz.batch.run import Reader, run_batch
from attnviz.circuits import distributed as distributed_circuit
from attnviz.distributed import Workers, ray_session
from attnviz.errors import UsageError

if TYPE_CHECKING:
    from attnviz.analysis.corpus import CorpusStatistics, CorpusWork
    from attnviz.batch.run import BatchWork, Tally
    from attnviz.extractor import Extractor, Spec
    from attnviz.inputs import Input
    from attnviz.progress import Listener
    from attnviz.request import Request
    from attnviz.results import Result


@dataclass(frozen=True)
class Work:
    """What :meth:`Extractor.run <attnviz.extractor.Extractor.run>` takes (the inputs, the
    request, what names each input in an error, a listener told how far each pass has
    got) and the model it runs on."""

    spec: Spec
    inputs: list[Input]
    request: Request
    names: list[str] | None = None
    progress: Listener | None = None


class Engine(Protocol):
    def session(self) -> AbstractContextManager[object]:
        """What the work needs running around it, entered before any of it: an
        unreachable cluster stops a command there, before anything is written."""
        ...

    def run_batch(self, work: BatchWork) -> Tally:
        """Every input's files, recorded in the folder's manifest as they are written;
        raises :class:`~attnviz.batch.PartialFailure` when some inputs failed."""
        ...

    def statistics(self, work: CorpusWork) -> CorpusStatistics:
        """The per-head statistics of every (line number, input)."""
        ...

    def run(self, work: Work) -> list[Result]:
        """What the work's request asks of its inputs, as the extractor's ``run`` gives it
        (a circuit's pairs: one result, each pass's sums over the pairs added up)."""
        ...


def _load(spec: Spec) -> Extractor:
    return spec.load()


@dataclass(frozen=True)
class Local:
    """This process reads the model; ``jobs`` processes draw the batch's pictures."""

    jobs: int = 1
    # How the model is loaded: the command line shows a spinner meanwhile.
    load: Callable[[Spec], Extractor] = field(default=_load, compare=False)

    def session(self) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def run_batch(self, work: BatchWork) -> Tally:
        return run_batch(work, Reader(self.load(work.spec), work.request), self.jobs)

    def statistics(self, work: CorpusWork) -> CorpusStatistics:
        extractor = self.load(work.spec)  # before the first line is read
        corpus = CorpusStatistics()
        for inputs in corpus.add_corpus(extractor, work.lines, work.request, work.batch_size):
            work.progress(inputs)
        return corpus

    def run(self, work: Work) -> list[Result]:
        extractor = self.load(work.spec)
        return list(
            extractor.run(work.inputs, work.request, progress=work.progress, names=work.names)
        )


@dataclass(frozen=True)
class Ray:
    """Ray workers, each holding the model, on the cluster at ``address`` (None: Ray's
    RAY_ADDRESS, else a local Ray started for the work and stopped after it)."""

    address: str | None = None
    workers: Workers = field(default_factory=Workers)

    def session(self) -> AbstractContextManager[object]:
        return ray_session(self.address)

    def run_batch(self, work: BatchWork) -> Tally:
        return distributed.run_batch(work, self.workers)

    def statistics(self, work: CorpusWork) -> CorpusStatistics:
        return distributed.corpus_statistics(work, self.workers)

    def run(self, work: Work) -> list[Result]:
        if work.request.circuit is None:  # Ray reads a batch and a corpus by their own work
            raise UsageError("on Ray, a request is read for a circuit's pairs alone")
        found = distributed_circuit.circuit_found(
            work.spec, work.inputs, work.request, work.names, self.workers
        )
        return [found]


# The type checker holds both engines to the interface (make lint runs it).
ENGINES: tuple[type[Engine], ...] = (Local, Ray)
