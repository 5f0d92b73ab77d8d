"""A batch's folder: one writer at a time (:class:`FolderLock`), every manifest in it
honoured (:func:`plan_folder`), and what a stopped run left behind removed: only files
a run of the folder claimed, never one it did not make."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnviz.atomic_files import open_output, remove_if_abandoned, temporaries
from attnviz.batch.ledger import remove_made, say_kept
from attnviz.batch.manifest import (
    Contents,
    Record,
    claim,
    folder_manifests,
    is_claim,
    manifest_name,
    read_contents,
)
from attnviz.errors import AttnvizError, UsageError, warn


@dataclass(frozen=True)
class FolderPlan:
    """How a run honours the manifests already in its folder."""

    manifest: Path  # this run's
    earlier: dict[int, Record] = field(default_factory=dict)  # what --resume may skip
    absorbed: tuple[Path, ...] = ()  # their records are taken over; removed at the end
    replaced: tuple[Path, ...] = ()  # --overwrite: removed first, with the files they record
    # The names in the folder that no manifest claims or records as the run begins: the
    # user's own files, said once (the writers look again as they write).
    foreign: frozenset[str] = frozenset()
    # The names the folder's manifests claim or record: a batch's own, which a run may
    # write over.
    ours: frozenset[str] = frozenset()


def plan_folder(
    folder: Path,
    shard: tuple[int, int] | None,
    *,
    resume: bool,
    overwrite: bool,
    request: dict[str, Any],
) -> FolderPlan:
    """What this run may do in ``folder``, given every manifest there; refuses (one line,
    exit 2) a run that would mix its files with another batch's.

    A whole batch's files may be any input's, so it honours every manifest: --resume
    takes their records over (finishing a sharded batch as one), --overwrite removes
    them and their files. A shard's files are its slice's: the other slices of the
    same N are its siblings, left alone but held to the same request; a whole batch
    or another N covers its files, as its own manifest does.
    """
    own = manifest_name(shard)
    found = folder_manifests(folder)
    contents = {name: read_contents(folder / name) for name in found}
    siblings = _siblings(found, shard)
    # Those whose files may be this run's. Its own manifest recording no input is a claim
    # left by a run of this slice that stopped before its first (none runs now: the lock).
    held = [
        name for name in found if name not in siblings and (name != own or contents[name].records)
    ]
    for sibling in siblings:
        if any(found != request for found in contents[sibling].requests):
            raise UsageError(
                f"{folder} holds {sibling}, written with other options: every shard of a "
                "batch takes the same ones (to change them, run the whole batch again "
                "without --shard, with --overwrite)"
            )
    ours = frozenset().union(*(found.claimed | found.recorded for found in contents.values()))
    plan = FolderPlan(manifest=folder / own, foreign=_foreign(folder, contents), ours=ours)
    if overwrite:
        return dataclasses.replace(plan, replaced=tuple(folder / name for name in held))
    if not resume:
        if held:
            raise UsageError(
                f"{folder} already holds a batch ({', '.join(held)}): add --resume to finish "
                "it, or --overwrite to start again"
            )
        return plan
    others = [name for name in held if name != own]
    if shard is not None and others:
        raise UsageError(
            f"--shard {shard[0]}/{shard[1]} --resume: {folder} holds {others[0]}, another "
            "slicing of the inputs: resume it as it was run, or add --overwrite to start again"
        )
    earlier: dict[int, Record] = {}
    for name in [*others, own]:  # this run's own manifest has the last word
        earlier.update(contents[name].records if name in contents else {})
    return dataclasses.replace(
        plan, earlier=earlier, absorbed=tuple(folder / name for name in others)
    )


def _siblings(found: dict[str, tuple[int, int] | None], shard: tuple[int, int] | None) -> list[str]:
    """The manifests of the other slices of this run's N: runs beside this one, whose
    files and claims are theirs."""
    if shard is None:
        return []
    own = manifest_name(shard)
    return [
        name
        for name, piece in found.items()
        if name != own and piece is not None and piece[1] == shard[1]
    ]


def _foreign(folder: Path, contents: dict[str, Contents]) -> frozenset[str]:
    """The names in ``folder`` that no run of it made: neither a manifest (``contents``,
    by name) nor the lock, nor claimed or recorded by a manifest, nor a temporary file
    of such a name."""
    ours = set().union(*(found.claimed | found.recorded for found in contents.values()))
    try:
        names = set(os.listdir(folder))
    except OSError:  # not made yet: nothing there
        return frozenset()
    names -= {FolderLock.NAME, *contents}
    names -= {path.name for path, name in temporaries(folder) if name in ours}
    return frozenset(names - ours)


def remove_replaced(plan: FolderPlan, request: dict[str, Any]) -> None:
    """--overwrite: the earlier batches' files and manifests go, so that none is left
    beside the new ones (only the names their manifests claim or record: nothing else is
    touched). This run's own manifest is begun anew with its claim, never missing
    meanwhile."""
    for manifest in plan.replaced:
        contents = read_contents(manifest)
        names = sorted(contents.claimed | contents.recorded)
        say_kept(manifest.parent, remove_made(manifest.parent, names, contents))
        if manifest == plan.manifest:
            claim(manifest, request, anew=True)
        else:
            manifest.unlink(missing_ok=True)


class FolderLock:
    """One writer per folder: a whole batch holds it alone; the shards of a batch share
    it, each slice alone. POSIX record locks on a lock file in the folder: the system
    drops them when a process ends however it ends, and they hold on network file
    systems too. The last writer out removes the file."""

    NAME = ".attnviz-batch.lock"

    def __init__(self, folder: Path, shard: tuple[int, int] | None) -> None:
        self.folder = folder
        self.shard = shard
        self.path = folder / self.NAME
        self.descriptor: int | None = None

    def __enter__(self) -> FolderLock:
        try:
            import fcntl
        except ImportError:  # no POSIX locks (Windows): one writer per folder is up to you
            return self
        while self.descriptor is None:
            try:
                descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
            except OSError as error:
                if error.errno == errno.ELOOP:  # O_NOFOLLOW met a link: none attnviz made
                    raise AttnvizError(
                        f"cannot lock {self.folder}: {self.path} is a symbolic link, not the "
                        "lock file attnviz makes there; remove it"
                    ) from None
                raise AttnvizError(f"cannot lock {self.folder}: {error.strerror}") from None
            try:
                self._lock(fcntl, descriptor)
            except BaseException:
                os.close(descriptor)
                raise
            if _same_file(descriptor, self.path):
                self.descriptor = descriptor
            else:  # locked as the last writer removed it: lock the new one
                os.close(descriptor)
        return self

    # Far past every slice's byte: planning is one run at a time, shards included.
    PLANNING_BYTE = 1 << 40

    @contextlib.contextmanager
    def planning(self) -> Iterator[None]:
        """Held while a run reads the folder's manifests and claims its own, so that two
        shards started together each read the other's claim, never both nothing. Waits
        for the other (a few milliseconds)."""
        if self.descriptor is None or self.shard is None:  # no POSIX locks; a batch alone
            yield
            return
        import fcntl

        fcntl.lockf(self.descriptor, fcntl.LOCK_EX, 1, self.PLANNING_BYTE)
        try:
            yield
        finally:
            fcntl.lockf(self.descriptor, fcntl.LOCK_UN, 1, self.PLANNING_BYTE)

    def _lock(self, fcntl: Any, descriptor: int) -> None:
        # Byte 0 is the folder, shared by the shards; byte 1 + n is the n-th slice
        # counted over every K/N, 1/1, 1/2, 2/2, 1/3...
        try:
            if self.shard is None:
                fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # every byte
                return
            fcntl.lockf(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
        except OSError as error:
            raise self._busy(error, "a batch") from None
        number, count = self.shard
        try:
            fcntl.lockf(
                descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, count * (count - 1) // 2 + number
            )
        except OSError as error:
            raise self._busy(error, f"shard {number}/{count}") from None

    def _busy(self, error: OSError, what: str) -> AttnvizError:
        if error.errno not in (errno.EAGAIN, errno.EACCES):
            return AttnvizError(f"cannot lock {self.folder}: {error.strerror}")
        return AttnvizError(
            f"another attnviz run is writing {what} into {self.folder}: wait until it ends, "
            "or write elsewhere"
        )

    def __exit__(self, *exc: object) -> None:
        if self.descriptor is None:
            return
        import fcntl

        with contextlib.suppress(OSError):  # held by another writer still: it stays
            fcntl.lockf(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.path.unlink()
        os.close(self.descriptor)
        self.descriptor = None


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        named = path.lstat()
    except OSError:
        return False
    held = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def remove_left_behind(folder: Path, shard: tuple[int, int] | None) -> None:
    """After a run's engine session, however it ended, the folder made to account for its
    files: the temporary files of the names its manifests claim or record that nobody
    will finish removed (Ray stops a worker mid-write when its driver ends on Ctrl-C or
    SIGTERM; a run killed with kill -9 leaves its own), waiting a few seconds for those
    still at work; then the files claimed but recorded by no manifest (drawn as the run
    was stopped, written by a killed run, or by an input that failed after writing some),
    and the claims settled; and its manifest if it records nothing. A file no run of the
    folder claimed is never touched. The manifests of this run's sibling shards, at work
    beside it, are theirs. Skipped if another run holds the folder by then."""
    if not folder.is_dir():
        return
    manifest = folder / manifest_name(shard)
    deadline = time.monotonic() + WORKERS_STOP
    with contextlib.suppress(AttnvizError), FolderLock(folder, shard):
        manifests = folder_manifests(folder)
        contents = {name: read_contents(folder / name) for name in manifests}
        siblings = set(_siblings(manifests, shard))
        recorded = set().union(*(found.recorded for found in contents.values()))
        known = Contents()  # what this run and the runs before it claimed (not siblings')
        for name, found in contents.items():
            if name not in siblings:
                known = known.merged(found)
        claimed = known.claimed
        ours = claimed | recorded
        while held := [
            path
            for path, name in temporaries(folder)
            if name in ours and not remove_if_abandoned(path)
        ]:
            if time.monotonic() >= deadline:
                warn(
                    f"{len(held)} temporary file(s) in {folder} still held by a worker"
                    f" ({held[0].name}); the next batch into the folder removes them"
                )
                return
            time.sleep(0.05)
        say_kept(folder, remove_made(folder, sorted(claimed - recorded), known))
        for name, found in contents.items():
            if name not in siblings and found.claimed:
                _settle(folder / name)
        if not contents.get(manifest.name, Contents()).records:
            manifest.unlink(missing_ok=True)


def _settle(manifest: Path) -> None:
    """A manifest rewritten without its claims, once their files are recorded or gone."""
    lines = manifest.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    with open_output(manifest, follow_links=False) as out:
        out.writelines(line for line in lines if not is_claim(line))


WORKERS_STOP = 10.0  # seconds: Ray stops a job's workers once its driver has left
