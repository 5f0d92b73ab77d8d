"""What memory a process may still take: the machine's, its address-space limit's, its
control group's; and requests that cannot fit refused before any work, in one line; how
many numbers a block of work holds on each device."""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import subprocess
from pathlib import Path

import pytest

from attnviz import memory
from tests.processes import ATTNVIZ


def _tree(root, path, limits):
    """A control-group tree: ``limits`` maps a group's path to its (limit, usage)."""
    for group, (limit, usage) in limits.items():
        folder = root / group.lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / path[0]).write_text(f"{limit}\n")
        (folder / path[1]).write_text(f"{usage}\n")


def test_a_cgroup_v2_limit_leaves_the_least_room_of_the_groups_up_to_the_root(tmp_path):
    _tree(
        tmp_path,
        ("memory.max", "memory.current"),
        {"/": ("max", 5 << 30), "/box": (3 << 30, 1 << 30), "/box/job": ("max", 1 << 29)},
    )
    membership = tmp_path / "cgroup"
    membership.write_text("0::/box/job\n")
    found = memory.cgroup_room(tmp_path, membership)
    assert found == memory.Room(2 << 30, "left under this process's cgroup limit")


def test_a_cgroup_v1_memory_limit_counts_and_its_no_limit_does_not(tmp_path):
    files = ("memory.limit_in_bytes", "memory.usage_in_bytes")
    membership = tmp_path / "cgroup"
    membership.write_text("5:cpu,cpuacct:/other\n4:memory:/job\n0::/\n")
    _tree(
        tmp_path / "memory",
        files,
        {"/": (9223372036854771712, 7 << 30), "/job": (1 << 30, 1 << 28)},
    )
    assert memory.cgroup_room(tmp_path, membership).free == (1 << 30) - (1 << 28)
    _tree(tmp_path / "memory", files, {"/job": (9223372036854771712, 1 << 28)})
    assert memory.cgroup_room(tmp_path, membership) is None


def test_the_room_is_the_least_of_what_bounds_it(monkeypatch):
    monkeypatch.setattr(memory, "_machine", lambda: memory.Room(8 << 30, "on the machine"))
    monkeypatch.setattr(memory, "_address_space", lambda: memory.Room(3 << 30, "under ulimit"))
    monkeypatch.setattr(memory, "cgroup_room", lambda *a: memory.Room(5 << 30, "in the group"))
    assert memory.room() == memory.Room(3 << 30, "under ulimit")
    assert str(memory.room()) == "3.0 GiB under ulimit"
    # a need past the room is told the room; one within it, or with no room known, nothing
    assert memory.short_of((3 << 30) + 1) == memory.Room(3 << 30, "under ulimit")
    assert memory.short_of(3 << 30) is None
    for bound in ("_machine", "_address_space", "cgroup_room"):
        monkeypatch.setattr(memory, bound, lambda *a: None)
    assert memory.short_of(1 << 60) is None


@pytest.mark.slow
def test_a_stack_past_the_address_space_limit_is_refused_before_it_is_built():
    """Under prlimit --as=4000000000 a stack that did not fit was built and died "out of
    memory: select fewer layers and heads", advice that cannot shrink a built-in stack."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3_000_000_000, resource.RLIM_INFINITY))

    stack = ["--d-model", "2048", "--num-layers", "6"]  # 2.6 GiB of weights
    result = subprocess.run(
        [*ATTNVIZ, "show", "a b", *stack, "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "attnviz: error: a stack of 6 layers with d_model 2048 needs about 3.4 GiB to build"
    )
    assert line.endswith(
        "left under this process's address-space limit (ulimit -v): choose a smaller "
        "--d-model or --num-layers"
    )


def _own_memory_cgroup() -> Path | None:
    """A folder for a child of this process's memory cgroup (v1 or v2), or None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return memory.CGROUPS / "memory" / path.lstrip("/")
        if controllers == "" and (memory.CGROUPS / "cgroup.controllers").exists():
            return memory.CGROUPS / path.lstrip("/")
    return None


@pytest.mark.slow
def test_a_stack_past_a_cgroup_limit_is_refused_not_killed(tmp_path):
    """Under a cgroup's limit the same stack was a silent SIGKILL."""
    parent = _own_memory_cgroup()
    group = None if parent is None else parent / f"attnviz-test-{os.getpid()}"
    try:
        group.mkdir()
        limit = "memory.limit_in_bytes" if "memory" in group.parts else "memory.max"
        (group / limit).write_text("2000000000")
    except (AttributeError, OSError) as error:
        pytest.skip(f"no memory cgroup of our own to make here: {error}")
    try:
        command = [*ATTNVIZ, "show", "a b", "--d-model", "2048", "--num-layers", "6"]
        result = subprocess.run(
            ["sh", "-c", f'echo $$ > {group / "cgroup.procs"} && exec "$@"', "sh", *command],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        group.rmdir()
    assert result.returncode == 2, result.stderr
    assert "left under this process's cgroup limit: choose a smaller --d-model" in result.stderr


def _resident() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's heap")
def test_freed_heap_blocks_pinned_by_blocks_kept_above_them_go_back_to_the_system():
    """What a long gradient pass does to glibc's heap: blocks freed between blocks kept
    stay resident (free() gives back only the heap's top) until they are handed back."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, count = 64 * 1024, 1600  # 100 MiB freed; each block under glibc's mmap threshold
    freed, kept = [], []
    for _ in range(count):
        freed.append(libc.malloc(size))
        ctypes.memset(freed[-1], 1, size)  # resident
        kept.append(libc.malloc(size))
    try:
        for block in freed:
            libc.free(block)
        held = _resident()
        memory.give_back_freed()
        assert held - _resident() > 50 * 2**20
    finally:
        for block in kept:
            libc.free(block)


@pytest.mark.parametrize("missing", [AttributeError("no malloc_trim"), TypeError("no CDLL(None)")])
def test_handing_the_heap_back_does_nothing_where_the_c_library_cannot(monkeypatch, missing):
    """musl and macOS have no malloc_trim, Windows no CDLL(None): nothing to do there."""

    def without(_name):
        raise missing

    monkeypatch.setattr(ctypes, "CDLL", without)
    memory.give_back_freed()


def test_a_block_holds_the_cpus_numbers_there_and_more_on_an_accelerator():
    """Blocks sized for a CPU's memory are thousands of small launches on a GPU: there a
    block holds more numbers, and on the CPU exactly what its caller asked."""
    import torch

    assert memory.block_size(2**22, torch.device("cpu")) == 2**22
    assert memory.block_size(2**22, torch.device("meta")) > 2**22  # any device but the CPU
