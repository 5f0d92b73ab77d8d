"""Running a batch's inputs through a model and its writers, recording each in the manifest."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnviz import signals
from attnviz.batch.folder import FolderPlan, remove_replaced
from attnviz.batch.inputs import BatchInput
from attnviz.batch.ledger import Manifest
from attnviz.batch.manifest import FileDigest, Record, is_complete
from attnviz.batch.workers import RenderPool
from attnviz.batch.writing import Outputs, Task, render_task
from attnviz.errors import AttnvizError, ExitCode, UsageError, describe
from attnviz.maps import AttentionMaps
from attnviz.render.image import Painter
from attnviz.request import asked_for

if TYPE_CHECKING:
    from attnviz.extractor import Extractor
    from attnviz.loading import ExtractorSpec
    from attnviz.request import Request


class PartialFailure(AttnvizError):
    """Some inputs of a batch failed; the rest were written."""

    exit_code = ExitCode.PARTIAL_FAILURE


@dataclass
class Tally:
    """What a batch did, kept up to date as it goes, so that it is right after an abort."""

    started: bool = False  # the folder was locked and planned: inputs began to run
    skipped: int = 0  # done by an earlier run, for the same request
    records: list[Record] = field(default_factory=list)  # finished by this run

    @property
    def failed(self) -> int:
        return sum(record.status == "failed" for record in self.records)


@dataclass(frozen=True)
class BatchWork:
    """A batch run's work, as every engine takes it: the inputs; the model to load and
    what to read of it; the files to write, into the folder as planned; ``batch_size``
    inputs read at once; ``progress`` told (inputs done, inputs in all) as they finish;
    ``tally`` kept up to date as the batch goes."""

    inputs: Sequence[BatchInput]
    spec: ExtractorSpec
    request: Request
    outputs: Outputs
    plan: FolderPlan
    batch_size: int
    progress: Callable[[int, int], None]
    tally: Tally = field(default_factory=Tally)


@dataclass(frozen=True)
class Reader:
    """What a batch reads of its inputs from a model: their maps, and, where pictures show
    the heads an answer needs (--top-heads N --by ablation), each input's effects on the
    answer its JSONL line carries."""

    extractor: Extractor
    request: Request

    def maps(self, chunk: list[BatchInput]) -> list[AttentionMaps]:
        items = [item.item for item in chunk]
        found = self.extractor.run(items, self.request, batch_size=len(items))
        return [asked_for(each.maps) for each in found]

    def outputs_for(self, item: BatchInput, outputs: Outputs) -> Outputs:
        """The outputs of one input: its own heads, where they are ranked by an effect."""
        top = outputs.top
        if top is None or not top.by_effect:
            return outputs
        if item.answer is None:
            raise UsageError(
                f'line {item.line} has no "answer": --by {top.by} ranks heads by their effect on it'
            )
        assert item.text is not None  # a readable input
        found = self.extractor.head_effects(item.text, item.answer, self.request)
        return replace(outputs, top=replace(top, effects=found))


def run_batch(work: BatchWork, reader: Reader, jobs: int) -> Tally:
    """Run every input; return what was done. Raises PartialFailure if some failed.

    ``reader`` turns a chunk of readable inputs into their maps; when it fails
    for a chunk, its inputs are retried one by one so that only the bad ones
    fail. Rendering runs here (jobs 1) or in worker processes, while the next
    chunk is extracted.
    """
    inputs, outputs, progress, tally = work.inputs, work.outputs, work.progress, work.tally
    pending, manifest = start_batch(work)
    done = tally.skipped
    progress(done, len(inputs))
    records = tally.records
    finished = False
    try:
        with RenderPool(jobs) as renderer:
            for chunk in _chunks(inputs, work.batch_size):
                for task in _tasks(chunk, pending, reader, outputs):
                    renderer.submit(task)
                for item, written in renderer.completed(wait=False):
                    done = _finish(item, written, manifest, records, done, len(inputs), progress)
            for item, written in renderer.completed(wait=True):
                done = _finish(item, written, manifest, records, done, len(inputs), progress)
        finished = True
    finally:
        manifest.close(finished=finished)
    check_failures(records, len(inputs), work.plan.manifest)
    return tally


def start_batch(work: BatchWork) -> tuple[set[int], Manifest]:
    """The indices of the inputs still to do (with --resume, those the folder's manifests
    do not record as done for today's request, files whole), and the manifest to record
    them in."""
    plan, folder = work.plan, work.outputs.folder
    request = work.outputs.fingerprint()
    pending = {
        item.index
        for item in work.inputs
        if not is_complete(plan.earlier.get(item.index), item, folder, request)
    }
    work.tally.skipped = len(work.inputs) - len(pending)
    remove_replaced(plan, request)
    return pending, Manifest(plan.manifest, request, plan.earlier, plan.absorbed)


def check_failures(records: Sequence[Record], total: int, manifest_path: Path) -> None:
    failed = [record for record in records if record.status == "failed"]
    if failed:
        first = failed[0]
        error = str(first.error)  # a reading error names its line already
        said = error.startswith((f"line {first.line} ", f"line {first.line}:"))
        where = "" if said else f"line {first.line}: "
        raise PartialFailure(
            f"{len(failed)} of {total} inputs failed (first: {where}{error}); see {manifest_path}"
        )


def _finish(
    item: BatchInput,
    written: dict[str, FileDigest] | Exception,
    manifest: Manifest,
    records: list[Record],
    done: int,
    total: int,
    progress: Callable[[int, int], None],
) -> int:
    record_done(_record(item, written, manifest.request), manifest, records)
    progress(done + 1, total)
    return done + 1


def record_done(record: Record, manifest: Manifest, records: list[Record]) -> None:
    """An input recorded in the manifest and among this run's records as one step: a
    Ctrl-C (or SIGTERM) in between waits until both are done, so that the summary of an interrupted
    batch counts what its manifest holds."""
    with signals.deferred():
        manifest.add(record)
        records.append(record)


def _tasks(
    chunk: list[BatchInput], pending: set[int], reader: Reader, outputs: Outputs
) -> Iterator[Task]:
    """The tasks of a chunk's pending inputs. The chunk is read whole, done inputs too:
    the company an input is read in (the padding, the batch's shape) moves its numbers
    in the last bits, and a resumed batch writes what a whole run would, byte for byte.
    A chunk with nothing pending is not read."""
    wanted = [item for item in chunk if item.index in pending]
    if not wanted:
        return
    readable = [item for item in chunk if item.error is None]
    try:
        results: dict[int, AttentionMaps | Exception] = dict(
            zip((item.index for item in readable), reader.maps(readable), strict=True)
        )
    except (AttnvizError, ValueError):
        results = {}
        for item in readable:  # find the inputs that fail, keep the rest
            if item.index not in pending:
                continue
            try:
                (results[item.index],) = reader.maps([item])
            except (AttnvizError, ValueError) as error:
                results[item.index] = error
    for item in wanted:
        maps: AttentionMaps | Exception = (
            UsageError(item.error) if item.error is not None else results[item.index]
        )
        own = outputs
        if not isinstance(maps, Exception):
            try:
                own = reader.outputs_for(item, outputs)
            except (AttnvizError, ValueError) as error:
                maps = error
        yield item, maps, own


def _chunks(items: Sequence[BatchInput], size: int) -> Iterator[list[BatchInput]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _record(item: BatchInput, written: dict[str, FileDigest] | Exception, request: dict) -> Record:
    base: dict[str, Any] = {
        "index": item.index,
        "line": item.line,
        "id": item.id,
        "text": item.text,
        "target": item.target,
        "pair": item.pair,
        "request": request,
    }
    if isinstance(written, Exception):
        return Record(**base, status="failed", error=describe(written)[1])
    return Record(**base, status="ok", files=list(written), digests=written)


def records_of(
    inputs: Sequence[BatchInput],
    pending: set[int],
    reader: Reader,
    outputs: Outputs,
    painter: Painter,
    batch_size: int,
) -> Iterator[Record]:
    """Each pending input's files written here and its manifest record, ``batch_size``
    inputs per model pass: the work of an engine whose workers write into the folder
    themselves (Ray's), each batch cut as the local engine cuts it (``inputs`` are whole
    chunks of the local engine's)."""
    fingerprint = outputs.fingerprint()
    for chunk in _chunks(inputs, batch_size):
        for task in _tasks(chunk, pending, reader, outputs):
            yield _record(*render_task(task, painter), fingerprint)


def pending_chunks(
    inputs: Sequence[BatchInput], pending: set[int], batch_size: int
) -> list[BatchInput]:
    """The chunks that hold a pending input, whole, one after the other."""
    return [
        item
        for chunk in _chunks(inputs, batch_size)
        if any(item.index in pending for item in chunk)
        for item in chunk
    ]
