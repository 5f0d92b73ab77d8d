"""Where ``batch`` and ``stats`` do their work: in this process (:class:`Local`) or on
Ray workers (:class:`Ray`), behind one small interface (:class:`Engine`).

Both engines take the same things (what to load, an :class:`~attnviz.loading.ExtractorSpec`;
what to read from it, a :class:`~attnviz.request.Request`) and give back the same
things, so that a command never asks which one runs. The batch's files are byte for
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
from attnviz.request import asked_for

if TYPE_CHECKING:
    from attnviz.analysis.corpus import CorpusStatistics, CorpusWork
    from attnviz.batch.run import BatchWork, Tally
    from attnviz.circuits.circuit import Circuit
    from attnviz.circuits.driver import CircuitWork
    from attnviz.extractor import Extractor, Spec


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

    def circuit(self, work: CircuitWork) -> Circuit:
        """The circuit of every pair: each pass's sums over the pairs added up."""
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

    def circuit(self, work: CircuitWork) -> Circuit:
        extractor = self.load(work.spec)
        (found,) = extractor.run(
            work.inputs, work.request, progress=work.progress, names=work.names
        )
        return asked_for(found.circuit)


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

    def circuit(self, work: CircuitWork) -> Circuit:
        return distributed_circuit.circuit_found(work, self.workers)


# The type checker holds both engines to the interface (make lint runs it).
ENGINES: tuple[type[Engine], ...] = (Local, Ray)
