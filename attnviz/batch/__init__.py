"""Batches: many inputs in, a folder of pictures and data and a manifest out.

Every input gets a deterministic, filesystem-safe name from its position in the
whole input (so that shards never clash) and its text or id. Every file is
written under a temporary name and renamed into place, so an interrupted run
leaves only complete files; ``manifest.jsonl`` records each input with its
files (each with its size and digest) and status, and ``resume`` skips the
inputs it records as done whose files are all there and whole. A folder has one
writer at a time (:class:`~attnviz.batch.folder.FolderLock`), and every run honours
every manifest in it (:func:`~attnviz.batch.folder.plan_folder`).

:class:`Batch` is the front door: ``Batch.prepare(...)`` reads the inputs and refuses
what cannot be done before any engine starts; ``batch.run(engine, ...)`` does the rest.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from attnviz.batch.folder import FolderLock, FolderPlan, plan_folder, remove_left_behind
from attnviz.batch.inputs import BatchInput, assign_names, in_shard, read_inputs
from attnviz.batch.ledger import Ledger
from attnviz.batch.manifest import claim
from attnviz.batch.run import BatchWork, Tally
from attnviz.batch.writing import Outputs
from attnviz.errors import AttnvizError, warn

if TYPE_CHECKING:
    from attnviz.engines import Engine
    from attnviz.loading import ExtractorSpec
    from attnviz.request import Request


@dataclass(frozen=True)
class Batch:
    """One batch: its inputs (those of this shard, blank lines left out) and what to
    write for each into which folder, and how to treat what the folder holds."""

    inputs: list[BatchInput]
    blank_lines: int
    outputs: Outputs
    shard: tuple[int, int] | None = None
    resume: bool = False
    overwrite: bool = False

    @classmethod
    def prepare(
        cls,
        source: str,
        outputs: Outputs,
        *,
        shard: tuple[int, int] | None = None,
        resume: bool = False,
        overwrite: bool = False,
    ) -> Batch:
        """The inputs of ``source`` (a file, or ``-``) read and named; a folder whose
        manifests forbid this run refused now, before an engine starts (a folder being
        written by another run waits for nothing: it is refused too)."""
        lines = read_inputs(source)
        assign_names(lines)
        lines = in_shard(lines, shard)
        inputs = [item for item in lines if not item.blank]
        batch = cls(inputs, len(lines) - len(inputs), outputs, shard, resume, overwrite)
        folder = outputs.folder
        with FolderLock(folder, shard) if folder.is_dir() else contextlib.nullcontext():
            batch.plan()
        return batch

    def plan(self) -> FolderPlan:
        """What the folder's manifests say this run does (refused if they forbid it)."""
        fingerprint = self.outputs.fingerprint()
        return plan_folder(
            self.outputs.folder,
            self.shard,
            resume=self.resume,
            overwrite=self.overwrite,
            request=fingerprint,
        )

    def run(
        self,
        engine: Engine,
        spec: ExtractorSpec,
        request: Request,
        *,
        batch_size: int,
        progress: Callable[[int, int], None],
        tally: Tally | None = None,
    ) -> Tally:
        """Every input through ``engine`` into the folder, made if needed: in the engine's
        session (an unreachable cluster stops the batch before anything is written), the
        folder locked and planned again; after it, the temporary files its workers left
        removed. ``tally`` (given: kept up to date as the batch goes, right after an
        abort too) says what was done."""
        tally = tally if tally is not None else Tally()
        folder = self.outputs.folder
        try:
            with engine.session():
                _writable_folder(folder)
                with FolderLock(folder, self.shard) as lock:
                    with lock.planning():
                        plan = self.plan()
                        claim(plan.manifest, self.outputs.fingerprint())
                    tally.started = True
                    _say_foreign(folder, plan)
                    outputs = replace(self.outputs, ledger=Ledger(plan.manifest, plan.ours))
                    work = BatchWork(
                        self.inputs, spec, request, outputs, plan, batch_size, progress, tally
                    )
                    engine.run_batch(work)
        finally:
            if tally.started:  # this run's slice of the folder, planned and claimed
                remove_left_behind(folder, self.shard)
        return tally


def _say_foreign(folder: Path, plan: FolderPlan) -> None:
    """A folder that holds files but no batch yet: said once, as the first run begins."""
    if plan.foreign and not plan.earlier and not plan.replaced:
        first = sorted(plan.foreign)[0]
        warn(
            f"{folder} holds {len(plan.foreign)} file(s) no batch made ({first}"
            f"{', ...' if len(plan.foreign) > 1 else ''}): they are left as they are, and an "
            "input whose file would take one's name fails"
        )


def _writable_folder(folder: Path) -> None:
    """The output folder, made if needed, and files can be written in it (checked without
    touching anything that is there)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise AttnvizError(f"cannot create the folder {folder}: {error.strerror}") from None
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise AttnvizError(f"cannot write into {folder}: {error.strerror}") from None
