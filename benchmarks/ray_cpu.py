"""Where the CPU time of `batch --engine ray` goes on one machine, beside the local engine's.

Runs `batch -f npz` over a generated corpus of MiniLM sentences once with the local
engine (--jobs 1) and once with a Ray that the command starts (2 workers), and
counts each process's CPU time (user + system, read from /proc every 0.2 s, so a
process's last fifth of a second may be missed). Linux only.

    python benchmarks/ray_cpu.py [--size 2000] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from scale import ATTNVIZ, corpus

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """Every process's command line and CPU seconds so far."""
    seen = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        seen[int(entry)] = (command.strip(), (int(fields[11]) + int(fields[12])) / TICKS)
    return seen


def group(command: str) -> str:
    """Ray names its workers, actors and agents in their command lines; its services run
    from its package."""
    if "MapWorker" in command:
        return "attnviz's Ray workers (model + work)"
    if command.startswith("ray::"):
        return "Ray Data's helper actors and Ray's agents"
    if "/ray/" in command:
        return "Ray's own services (GCS, raylet, dashboard, monitors)"
    return ""  # not Ray's: left out, unless it is the command itself


def settle(timeout: float = 30.0) -> None:
    """Wait for the last run's Ray processes to end: its workers are still exiting for
    about half a second after the command has."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(
        group(command) and _running(pid) for pid, (command, _) in cpu_seconds().items()
    ):
        time.sleep(0.2)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie waits only to be reaped


def measure(arguments: list[str]) -> tuple[float, dict[str, float]]:
    """Wall seconds of the command and the CPU seconds of each group of processes that
    ran meanwhile (started by it or not: run on a quiet machine)."""
    settle()
    before = cpu_seconds()
    start = time.perf_counter()
    process = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last: dict[int, tuple[str, float]] = {}
    while process.poll() is None:
        for pid, (command, seconds) in cpu_seconds().items():
            if "MapWorker" in last.get(pid, ("", 0.0))[0]:
                command = last[pid][0]  # a worker may be renamed as Ray ends it
            last[pid] = (command, seconds)
        time.sleep(0.2)
    wall = time.perf_counter() - start
    groups: dict[str, float] = defaultdict(float)
    for pid, (command, seconds) in last.items():
        used = seconds - before.get(pid, (command, 0.0))[1]
        name = "the attnviz command (the driver)" if pid == process.pid else group(command)
        if name and used > 0:
            groups[name] += used
    return wall, dict(groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=2)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    text = corpus(folder / "corpus.txt", options.size, (8, 20))
    engines = {
        "local (--jobs 1)": ["--jobs", "1"],
        "ray (2 workers)": ["--engine", "ray", "-j", "2"],
    }
    print(f"batch -f npz, {options.size} MiniLM sentences, {os.cpu_count()} cores:")
    for run in range(options.runs):
        totals = []
        for engine, extra in engines.items():
            out = folder / f"out-{run}-{engine.split()[0]}"
            command = [*ATTNVIZ, "batch", str(text), "-o", str(out), "--model", "minilm",
                       "-f", "npz", "-q", *extra]  # fmt: skip
            wall, groups = measure(command)
            totals.append((wall, sum(groups.values())))
            print(f"  {engine}: {wall:5.1f} s wall, {totals[-1][1]:5.1f} CPU-s")
            for name, seconds in sorted(groups.items(), key=lambda item: -item[1]):
                print(f"      {seconds:5.1f} CPU-s  {name}")
        (local_wall, local_cpu), (ray_wall, ray_cpu) = totals
        ratios = f"{ray_wall / local_wall:.2f}x the time, {ray_cpu / local_cpu:.2f}x the CPU"
        print(f"  ray / local: {ratios}")


if __name__ == "__main__":
    main()
