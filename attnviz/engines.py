"""Where ``batch`` and ``stats`` do their work: in this process (:class:`Local`) or on
Ray workers (:class:`Ray`), behind one small interface (:class:`Engine`).

Both engines take the same things (what to load, an :class:`~attnviz.loading.ExtractorSpec`;
what to read from it, a :class:`~attnviz.request.Request`) and give back the same
things, so that a command never asks which one runs. The batch's files are byte for
byte the same on either (tests/test_ray.py holds them to it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from attnviz import distributed
from attnviz.analysis.corpus import CorpusStatistics
from attnviz.batch.run import Reader, run_batch
from attnviz.distributed import Workers, ray_session

if TYPE_CHECKING:
    from attnviz.analysis.corpus import CorpusStatistics, Line
    from attnviz.batch.folder import FolderPlan
    from attnviz.batch.inputs import BatchInput
    from attnviz.batch.run import Tally
    from attnviz.batch.writing import Outputs
    from attnviz.extractor import Extractor
    from attnviz.loading import ExtractorSpec
    from attnviz.request import Request

BatchProgress = Callable[[int, int], None]  # (inputs done, inputs in all)
StatisticsProgress = Callable[[int], None]  # inputs counted so far


class Engine(Protocol):
    def session(self) -> AbstractContextManager[object]:
        """What the work needs running around it, entered before any of it: an
        unreachable cluster stops a command there, before anything is written."""
        ...

    def run_batch(
        self,
        inputs: Sequence[BatchInput],
        spec: ExtractorSpec,
        request: Request,
        outputs: Outputs,
        *,
        plan: FolderPlan,
        batch_size: int,
        progress: BatchProgress,
        tally: Tally,
    ) -> Tally:
        """Every input's files, recorded in the folder's manifest as they are written;
        raises :class:`~attnviz.batch.PartialFailure` when some inputs failed."""
        ...

    def statistics(
        self,
        lines: Iterable[Line],
        spec: ExtractorSpec,
        request: Request,
        *,
        batch_size: int,
        progress: StatisticsProgress,
    ) -> CorpusStatistics:
        """The per-head statistics of every (line number, item, answer)."""
        ...


def _load(spec: ExtractorSpec) -> Extractor:
    return spec.load()


@dataclass(frozen=True)
class Local:
    """This process reads the model; ``jobs`` processes draw the batch's pictures."""

    jobs: int = 1
    # How the model is loaded: the command line shows a spinner meanwhile.
    load: Callable[[ExtractorSpec], Extractor] = field(default=_load, compare=False)

    def session(self) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def run_batch(
        self,
        inputs: Sequence[BatchInput],
        spec: ExtractorSpec,
        request: Request,
        outputs: Outputs,
        *,
        plan: FolderPlan,
        batch_size: int,
        progress: BatchProgress,
        tally: Tally,
    ) -> Tally:
        return run_batch(
            inputs,
            Reader(self.load(spec), request),
            outputs,
            plan=plan,
            batch_size=batch_size,
            jobs=self.jobs,
            progress=progress,
            tally=tally,
        )

    def statistics(
        self,
        lines: Iterable[Line],
        spec: ExtractorSpec,
        request: Request,
        *,
        batch_size: int,
        progress: StatisticsProgress,
    ) -> CorpusStatistics:
        extractor = self.load(spec)  # before the first line is read
        corpus = CorpusStatistics()
        for inputs in corpus.add_corpus(extractor, lines, request, batch_size):
            progress(inputs)
        return corpus


@dataclass(frozen=True)
class Ray:
    """Ray workers, each holding the model, on the cluster at ``address`` (None: Ray's
    RAY_ADDRESS, else a local Ray started for the work and stopped after it)."""

    address: str | None = None
    workers: Workers = field(default_factory=Workers)

    def session(self) -> AbstractContextManager[object]:
        return ray_session(self.address)

    def run_batch(
        self,
        inputs: Sequence[BatchInput],
        spec: ExtractorSpec,
        request: Request,
        outputs: Outputs,
        *,
        plan: FolderPlan,
        batch_size: int,
        progress: BatchProgress,
        tally: Tally,
    ) -> Tally:
        return distributed.run_batch(
            inputs,
            spec,
            request,
            outputs,
            plan=plan,
            batch_size=batch_size,
            workers=self.workers,
            progress=progress,
            tally=tally,
        )

    def statistics(
        self,
        lines: Iterable[Line],
        spec: ExtractorSpec,
        request: Request,
        *,
        batch_size: int,
        progress: StatisticsProgress,
    ) -> CorpusStatistics:
        return distributed.corpus_statistics(
            lines, spec, request, batch_size=batch_size, workers=self.workers, progress=progress
        )


# The type checker holds both engines to the interface (make lint runs it).
ENGINES: tuple[type[Engine], ...] = (Local, Ray)
