"""Timing whole commands side by side: alternating runs, medians, ratios."""

from __future__ import annotations

import statistics
import subprocess
import time


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
