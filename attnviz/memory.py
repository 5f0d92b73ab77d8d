"""How much memory this process may still take: the least of what the machine has
available, what its address-space limit leaves (``ulimit -v``, ``prlimit --as``) and
what its control group's limit leaves (a container's, a systemd unit's). Checks
before long work compare their needs with it, so that a request that cannot fit is
refused in one line instead of dying: past the address-space limit an allocation
fails, past a cgroup's the kernel kills the process without a word. And how many numbers
a computation done a block at a time holds at once on a device (stdlib only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

CGROUPS = Path("/sys/fs/cgroup")


class Room(NamedTuple):
    """Bytes this process may still take, and what bounds them, as a message says it."""

    free: int
    bound: str

    def __str__(self) -> str:
        return f"{self.free / 2**30:.1f} GiB {self.bound}"


def room(cgroups: Path = CGROUPS) -> Room | None:
    """The memory this process may still take (None where the system says nothing)."""
    found = [
        found
        for found in (_machine(), _address_space(), cgroup_room(CGROUPS, MEMBERSHIP))
        if found is not None
    ]
    return min(found, key=lambda found: found.free, default=None)


def short_of(needed: float) -> Room | None:
    """The room this process may still take, where ``needed`` bytes do not fit in it
    (None where they do, or where the system says nothing)."""
    free = room()
    return free if free is not None and needed > free.free else None


def _machine() -> Room | None:
    """MemAvailable: free memory and the caches the kernel would give back."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return Room(int(line.split()[1]) * 1024, "available on this machine")
    except (OSError, ValueError, IndexError):
        pass
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return Room(free, "free on this machine")


def _address_space() -> Room | None:
    """The soft RLIMIT_AS less the address space this process maps already (torch maps
    gigabytes it never touches: the limit counts them all)."""
    try:
        import resource

        limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, AttributeError, ValueError, OSError):  # no such limit here
        return None
    if limit == resource.RLIM_INFINITY:
        return None
    mapped = _status_bytes("VmSize")
    if mapped is None:
        return None
    return Room(max(0, limit - mapped), "left under this process's address-space limit (ulimit -v)")


def _status_bytes(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


MEMBERSHIP = Path("/proc/self/cgroup")  # the groups this process is in


def cgroup_room(root: Path, membership: Path) -> Room | None:
    """The least room any control group holding this process leaves: each limit less
    what its processes use, from this process's group up (v2: memory.max, v1: the
    memory controller's memory.limit_in_bytes)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "-", "")
        if controllers == "":  # v2: one hierarchy
            rooms += _limits(root, path, "memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # v1: the memory controller's own
            rooms += _limits(
                root / "memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes"
            )
    return min(rooms, key=lambda found: found.free, default=None)


_UNLIMITED = 1 << 62  # v1 says "no limit" with a number near 2**63


def _limits(mount: Path, path: str, limit_file: str, usage_file: str) -> list[Room]:
    rooms = []
    folder = mount / path.lstrip("/")
    while True:
        try:
            limit = (folder / limit_file).read_text().strip()
            usage = int((folder / usage_file).read_text().strip())
            if limit != "max" and int(limit) < _UNLIMITED:
                rooms.append(
                    Room(max(0, int(limit) - usage), "left under this process's cgroup limit")
                )
        except (OSError, ValueError):
            pass
        if folder == mount or mount not in folder.parents:
            return rooms
        folder = folder.parent


def give_back_freed() -> None:
    """Hands the pages of freed heap memory back to the system, where the C library can
    (glibc's ``malloc_trim``; elsewhere nothing happens). glibc keeps freed blocks below
    its mmap threshold, which grows up to 32 MiB, in its heap, and a block kept alive
    above them pins the pages beneath: a long pass that keeps one tensor per layer while
    it frees others as large holds the freed ones' pages too."""
    import ctypes  # the C library only where this is asked for

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (Windows: no CDLL(None))
        return
    trim(0)


_ON_AN_ACCELERATOR = 8  # times the numbers a block holds where it is not computed on the CPU


def block_size(numbers: int, device: Any) -> int:
    """How many numbers a computation done a block at a time takes at once on ``device``
    (a torch device): ``numbers``, the CPU's, or 8× as many on an accelerator, where each
    block's launches cost more than its memory (at 8,192 tokens, EAP's compact record
    widened 72 positions at a time on an H200 took four times the rest of the command)."""
    return numbers if device.type == "cpu" else numbers * _ON_AN_ACCELERATOR
