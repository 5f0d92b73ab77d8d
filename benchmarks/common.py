"""Timing whole commands side by side: alternating runs, medians, ratios; the time and peak
memory of one command in a fresh process."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Runs a command with a file on stdin; prints its time and its peak RSS (the only child).
_MEASURE = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
with open(sys.argv[1], "rb") as text:
    subprocess.run(sys.argv[2:], stdin=text, stdout=subprocess.DEVNULL, check=True)
elapsed = time.perf_counter() - started
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": elapsed, "peak_mib": peak_kib / 1024}))
"""


def time_and_peak(stdin: Path, command: list[str]) -> dict[str, float]:
    """Wall time and peak RSS (MiB) of ``command`` reading ``stdin``, in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(stdin), *command], capture_output=True, text=True
    )
    if result.returncode:
        said = result.stderr.strip().splitlines()
        raise RuntimeError(f"{command[2:4]} failed: {said[-1] if said else result.returncode}")
    return json.loads(result.stdout)


def time_once(command: list[str], check: bool = True) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def medians(commands: dict[str, list[str]], runs: int, check: bool = True) -> dict[str, float]:
    """Median wall time of each command; the commands take turns so they share machine state.
    ``check=False`` times commands that are meant to fail (usage errors) too."""
    for command in commands.values():  # warm the file cache
        time_once(command, check)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            samples[name].append(time_once(command, check))
    result = {name: statistics.median(times) for name, times in samples.items()}
    for name, seconds in result.items():
        print(f"{name:44} median {seconds * 1000:7.0f} ms over {runs} runs")
    return result
