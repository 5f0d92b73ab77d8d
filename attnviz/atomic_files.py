"""Writing files with nothing half-written on failure: a file appears only when it is
whole, stdout gets whole writes, and a writer killed mid-write is told apart from one at
work."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from attnviz.errors import AttnvizError, UsageError

STDIO = "-"


@contextlib.contextmanager
def open_output(
    destination: str | Path,
    *,
    binary: bool = False,
    follow_links: bool = True,
    before_rename: Callable[[Path], None] | None = None,
) -> Iterator[IO[Any]]:
    """A stream to write to: stdout for ``-``, else a file that appears only when complete.

    A regular file (or none yet) is written under a temporary name in its own
    folder and renamed into place on success, keeping an existing file's
    permission bits; on any failure the temporary file is removed, so an
    interrupted write never leaves a truncated file. A character device or FIFO
    (``/dev/null``, ``/dev/stdout``, a named pipe that a process reads) is written
    through, never replaced; a block device, a socket and a FIFO nobody reads are
    refused. A symbolic link is followed to its target, which
    is replaced atomically; with ``follow_links=False`` (a batch's own folder)
    the link itself is replaced, so nothing lands outside the folder.
    ``before_rename`` is given the whole temporary file just before it takes its name
    (a batch claims its digest then).
    """
    if str(destination) == STDIO:
        stream = sys.stdout.buffer if binary else sys.stdout
        yield cast(IO[Any], WholeWrites(stream))  # it forwards all else to the stream
        stream.flush()
        return
    path = Path(destination)
    if path.is_symlink() and not follow_links:
        target = path
    else:
        if _is_special(path):
            yield from _write_through(path, binary)
            return
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if target.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory; give a file name")
    if not target.parent.is_dir():
        raise AttnvizError(f"cannot write {path}: folder {target.parent} does not exist")
    mode_bits = _regular_file_mode(target)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as error:
        raise AttnvizError(f"cannot write {path}: {error.strerror}") from None
    try:
        mode = "wb" if binary else "w"
        encoding = None if binary else "utf-8"
        with os.fdopen(descriptor, mode, encoding=encoding, newline=None if binary else "") as out:
            _mark_as_being_written(descriptor)
            yield out
            out.flush()
            # mkstemp made it private: give it the mode the file had, or the usual one.
            os.chmod(temporary, mode_bits if mode_bits is not None else usual_mode())
            if before_rename is not None:
                before_rename(Path(temporary))
            if os.name == "posix":  # renamed before closing, which would drop the mark
                os.replace(temporary, target)
        if os.name != "posix":  # Windows renames no open file
            os.replace(temporary, target)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        if error.errno in _FULL:  # said of a stream, which names no file: this one's
            raise AttnvizError(f"cannot write {path}: {error.strerror}") from None
        raise
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# What only a write fails with: the device or the quota full, a file past its largest.
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


# The temporary name of open_output: its prefix, then mkstemp's eight characters.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}")


def _mark_as_being_written(descriptor: int) -> None:
    """A lock on a temporary file while its writer is at work. The system drops it when
    the writer ends, however it ends (kill -9, a Ray worker stopped with its job), so
    that a temporary file left unlocked is one that nobody will finish."""
    with contextlib.suppress(ImportError, OSError):  # no POSIX locks: left unmarked
        import fcntl

        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)


def temporaries(folder: Path) -> Iterator[tuple[Path, str]]:
    """The temporary files of :func:`open_output` in ``folder``, each with the name it
    was being written as."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            match = _TEMPORARY.fullmatch(entry.name)
            if match and entry.is_file(follow_symlinks=False):
                yield Path(entry.path), match["name"]


def remove_if_abandoned(path: Path) -> bool:
    """Remove a temporary file of :func:`open_output` whose writer ended without
    finishing it; False, leaving it, while a writer holds it (or where the system cannot
    tell). A writer in this very process is not seen: call it between writes."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:  # finished meanwhile, or removed
        return True
    except OSError:
        return False
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by its writer (EAGAIN, EACCES), or no locks here
        return False
    else:
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(descriptor)


class _Probe(Exception):
    pass


def check_writable(destination: str | Path) -> None:
    """Refuse now, before long work, a file that :func:`open_output` could not write:
    it is opened and abandoned, which removes its temporary file and leaves whatever
    the name held untouched. The temporary files an earlier writer of the same name
    left when it was killed (nothing could remove them then) are removed now."""
    if str(destination) == STDIO:
        return
    if _is_special(Path(destination)):
        _check_special(Path(destination))
        return
    with contextlib.suppress(_Probe), open_output(destination, binary=True):
        raise _Probe
    target = Path(os.path.realpath(destination))
    for leftover, name in temporaries(target.parent):
        if name == target.name:
            remove_if_abandoned(leftover)


def _is_special(path: Path) -> bool:
    """A device, FIFO or socket (following links): written through, never replaced."""
    try:
        mode = path.stat().st_mode
    except OSError:  # not there (or a dangling link): a file to create
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _check_special(path: Path) -> None:
    """Refuse a special file that is no place for output: a block device (a disk, which
    would be written over) or a socket (which cannot be opened). A character device
    (``/dev/null``, a terminal) and a FIFO are written through; whether a FIFO has a
    reader is found when it is written (opening it to look would end its reader's read)."""
    mode = path.stat().st_mode
    if stat.S_ISBLK(mode):
        raise UsageError(f"cannot write {path}: it is a block device; give a file name")
    if stat.S_ISSOCK(mode):
        raise UsageError(f"cannot write {path}: it is a socket; give a file name")


def _write_through(path: Path, binary: bool) -> Iterator[IO[Any]]:
    """A device or FIFO written in place. A FIFO that no process reads is refused at once,
    never waited for: opening it to write would block until a reader came."""
    _check_special(path)
    fifo = stat.S_ISFIFO(path.stat().st_mode)
    try:
        descriptor = os.open(path, os.O_WRONLY | (os.O_NONBLOCK if fifo else 0))
    except OSError as error:
        if fifo and error.errno == errno.ENXIO:
            raise AttnvizError(
                f"cannot write {path}: it is a named pipe that no process reads; start its "
                "reader first, or give a file name"
            ) from None
        raise AttnvizError(f"cannot write {path}: {error.strerror}") from None
    if fifo:
        os.set_blocking(descriptor, True)  # a reader is there: wait on it as it reads
    with os.fdopen(
        descriptor, "wb" if binary else "w", encoding=None if binary else "utf-8"
    ) as out:
        yield cast(IO[Any], WholeWrites(out))


class WholeWrites:
    """A stream whose every write is whole. Python's writers hand a pipe one write(2),
    which Linux caps at 2 GiB - 4 KiB; the rest is dropped, silently in text mode (an
    npz of 2.2 GB into a pipe arrived cut at 2,147,479,552 bytes). Writes are made in
    pieces under that cap, each repeated until the stream took all of it."""

    BYTES = 1 << 30  # a piece of bytes
    CHARACTERS = 1 << 28  # a piece of text: at most 4 bytes a character in UTF-8

    def __init__(self, stream: IO[Any]) -> None:
        self.stream = stream

    def write(self, data: Any) -> int:
        if isinstance(data, str):
            for start in range(0, len(data), self.CHARACTERS):
                self.stream.write(data[start : start + self.CHARACTERS])
            return len(data)
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            piece = view[: self.BYTES]
            written = self.stream.write(piece)  # None: a raw stream took all of it
            view = view[len(piece) if written is None else written :]
        return total

    def writelines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _regular_file_mode(path: Path) -> int | None:
    """The permission bits of the regular file at ``path`` itself (a link's own 0777 is
    no file's mode), or None for anything else."""
    try:
        status = path.lstat()
    except OSError:
        return None
    return stat.S_IMODE(status.st_mode) if stat.S_ISREG(status.st_mode) else None


def file_blake2b(path: Path, digest_size: int = 64) -> str:
    """The BLAKE2b digest of a file, read a piece at a time (weights run to gigabytes)."""
    digest = hashlib.blake2b(digest_size=digest_size)
    with open(path, "rb") as stream:
        while piece := stream.read(1 << 22):
            digest.update(piece)
    return digest.hexdigest()


def usual_mode(folder: bool = False) -> int:
    """The permission bits a new file (or folder) gets from the user's umask: what a
    file made by a private temporary name is given when it takes its place."""
    current = os.umask(0)
    os.umask(current)
    return (0o777 if folder else 0o666) & ~current


def write_text(content: str, destination: str | Path) -> None:
    with open_output(destination) as out:
        out.write(content)
