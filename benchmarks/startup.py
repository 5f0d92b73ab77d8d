"""Start-up cost of `attnviz show`, measured against a bare `import torch` in the same run.

Target (issue 2): `attnviz show "Hello I love you"` takes at most 1.2x the time
of `python -c "import torch"`. `attnviz --help` and `--version` must not pay
for torch at all, so they are compared with a bare `python -c pass`.

Runs alternate between the commands so that both see the same machine state;
the figure is the ratio of medians.

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

ATTNVIZ = [sys.executable, "-m", "attnviz"]
COMMANDS = {
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    "python -c pass": [sys.executable, "-c", "pass"],
    'attnviz show "Hello I love you"': [*ATTNVIZ, "show", "Hello I love you", "--width", "120"],
    "attnviz --help": [*ATTNVIZ, "--help"],
    "attnviz --version": [*ATTNVIZ, "--version"],
}


def time_once(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    arguments = parser.parse_args()
    for command in COMMANDS.values():  # warm the file cache
        time_once(command)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(arguments.runs):
        for name, command in COMMANDS.items():
            samples[name].append(time_once(command))
    median = {name: statistics.median(times) for name, times in samples.items()}
    for name, seconds in median.items():
        print(f"{name:34} median {seconds * 1000:7.0f} ms over {arguments.runs} runs")
    torch_base = median["python -c 'import torch'"]
    show_ratio = median['attnviz show "Hello I love you"'] / torch_base
    print(f"show / import torch = {show_ratio:.2f}x (target <= 1.20x)")
    print(f"--help / python -c pass = {median['attnviz --help'] / median['python -c pass']:.2f}x")
    sys.exit(0 if show_ratio <= 1.2 else 1)


if __name__ == "__main__":
    main()
