"""What a batch's run writes into its folder's manifest: each file's name claimed before
anything is made there (:class:`Ledger`), a record per finished input (:class:`Manifest`),
and the files a run made, and only those, removed when an input is redone or a run
overwritten (:func:`remove_made`). Reading a manifest back: :mod:`attnviz.batch.manifest`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from attnviz.atomic_files import open_output
from attnviz.batch.manifest import (
    CLAIM,
    DIGESTS,
    Contents,
    FileDigest,
    Record,
    append_line,
    is_whole,
    read_contents,
)
from attnviz.data_formats import dump_json
from attnviz.errors import AttnvizError, warn


@dataclass(frozen=True)
class Ledger:
    """How a run's writers account for the files they make in its folder: each name is
    claimed in the run's manifest before anything is made there, then held by an empty
    placeholder made only if the name is free (``O_EXCL``: a file that appeared since
    the run began is never written over), and its file's digest claimed once the file
    is whole, before it takes the name. A run killed at any point leaves claims that
    the next run settles (removing only an empty placeholder or a file whose content
    is a claimed digest), never an orphan nobody may remove. Runs in any process that
    writes the files (render workers, Ray workers)."""

    manifest: Path  # this run's
    # Names the folder's manifests claim or record: a batch's own, which a run may write
    # over (an input redone); any other name is written only where it is free.
    ours: frozenset[str] = frozenset()

    def claim(self, name: str) -> None:
        """``name`` claimed for a file this run is about to write; refused (the input
        fails) where a file no batch made holds it, or appears there meanwhile."""
        path = self.manifest.parent / name
        if name in self.ours or self._made_here(path):
            append_line(self.manifest, dump_json({CLAIM: [name]}))
            return
        if os.path.lexists(path):
            raise self._taken(path)
        append_line(self.manifest, dump_json({CLAIM: [name]}))
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
        except FileExistsError:  # it appeared between the look and the claim
            raise self._taken(path) from None

    def _made_here(self, path: Path) -> bool:
        """A file this run began and a writer of its left (a Ray worker stopped after
        claiming the name: its input is retried elsewhere), as its manifest tells it:
        the placeholder, or a whole file whose digest it claimed."""
        return os.path.lexists(path) and _made_by_a_run(
            path, path.name, read_contents(self.manifest)
        )

    def written(self, name: str, digest: FileDigest) -> None:
        """The whole file's digest claimed, before it takes ``name``."""
        append_line(self.manifest, dump_json({CLAIM: [name], DIGESTS: {name: digest}}))

    @staticmethod
    def _taken(path: Path) -> AttnvizError:
        return AttnvizError(
            f"{path} is there already and no batch made it: it is left as it is (move it "
            "away, or write into another folder)"
        )


def remove_made(folder: Path, names: Iterable[str], known: Contents) -> list[str]:
    """The files of these names in ``folder`` that a run made removed, as ``known`` (the
    folder's manifests) tells them: a link at a name they claim or record (never its
    target), an empty placeholder at a claimed name, a file whose content is a digest
    given for its name. Returns the names kept: files whose content no run wrote (the
    user's, or one a forged claim names), for the caller to say."""
    kept = []
    for name in names:
        path = folder / name
        if path.is_symlink() or _made_by_a_run(path, name, known):
            path.unlink(missing_ok=True)
        elif path.is_file():
            kept.append(name)
    return kept


def _made_by_a_run(path: Path, name: str, known: Contents) -> bool:
    try:
        status = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(status.st_mode):
        return False
    if status.st_size == 0:
        return name in known.claimed  # a placeholder: a run stopped before the file was whole
    sized = [d for d in known.digests.get(name, []) if d.get("size") == status.st_size]
    return bool(sized) and any(is_whole(path, digest) for digest in sized)


def say_kept(folder: Path, kept: list[str]) -> None:
    """One line for the claimed files kept because no run wrote what they hold."""
    if kept:
        more = f" and {len(kept) - 1} more" if len(kept) > 1 else ""
        warn(
            f"{folder / kept[0]}{more}: a manifest claims it, but its content is not what a "
            "batch wrote: it is left as it is"
        )


class Manifest:
    """Appends a record per finished input, each line written whole; at the end, compacts
    and removes the manifests whose records it took over."""

    def __init__(
        self,
        path: Path,
        request: dict,
        earlier: dict[int, Record] | None = None,
        absorbed: tuple[Path, ...] = (),
    ) -> None:
        self.path = path  # claimed already (:func:`claim`): lines go on after it
        self.absorbed = absorbed  # earlier manifests whose records it takes over
        self.records = dict(earlier or {})  # what --resume skipped, kept
        self.request = request  # stamped on every record this run adds

    def add(self, record: Record) -> None:
        """``record`` written, replacing an earlier run's record of its input: where the input
        failed this time, its earlier files stay recorded (``--overwrite`` still removes
        them); where it was written anew, those of its earlier files it no longer has go."""
        earlier = self.records.get(record.index)
        stale: dict[str, FileDigest | None] = {}  # earlier files it no longer gets, digests
        if earlier is not None and record.status == "failed":
            record = replace(record, files=earlier.files, digests=earlier.digests)
        elif earlier is not None:
            written = earlier.digests or {}
            stale = {name: written.get(name) for name in earlier.files if name not in record.files}
        known = Contents()
        if stale:  # still the folder's own once the new record hides the old one
            known.add_digests(stale)
            append_line(self.path, dump_json({CLAIM: list(stale), DIGESTS: stale}))
        self.records[record.index] = record
        append_line(self.path, dump_json(record.to_dict()))
        say_kept(self.path.parent, remove_made(self.path.parent, stale, known))

    def close(self, finished: bool) -> None:
        """A finished run's manifest rewritten whole: one line per input, in input order,
        and one claim of the files claimed but not recorded (an input that failed after
        writing some), which :func:`~attnviz.batch.folder.remove_left_behind` settles."""
        if not finished:
            return
        known = Contents()
        for path in (self.path, *self.absorbed):
            known = known.merged(read_contents(path))
        recorded = {name for record in self.records.values() for name in record.files}
        lines = [dump_json(self.records[index].to_dict()) for index in sorted(self.records)]
        if unsettled := sorted(known.claimed - recorded):
            digests = {name: known.digests[name] for name in unsettled if name in known.digests}
            lines.append(dump_json({CLAIM: unsettled, DIGESTS: digests}))
        with open_output(self.path, follow_links=False) as out:
            out.writelines(lines)
        for manifest in self.absorbed:
            manifest.unlink(missing_ok=True)
