"""Peak memory and time of `attnviz show` on long inputs of the built-in stack.

Target (issue 7): a 4,096-token input with --layer 0 --head 0 --format npz
completes with a peak RSS under 1.5 GB: maps of layers and heads that were not
asked for are never held, and work stops after the last layer asked for.

Each size runs in a fresh process whose children's peak RSS is read back.

    python benchmarks/memory.py [--sizes 512 1024 2048 4096]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from common import time_and_peak

WORDS = [
    word.strip(".,").lower()
    for word in (Path(__file__).resolve().parent.parent / "sample_texts" / "paragraph.txt")
    .read_text()
    .split()
    if word.strip(".,").isalpha()
]


def measure(tokens: int, folder: Path) -> dict[str, float]:
    text = folder / f"text-{tokens}.txt"
    text.write_text(" ".join(random.Random(tokens).choice(WORDS) for _ in range(tokens)) + "\n")
    command = [
        sys.executable,
        "-m",
        "attnviz",
        "show",
        "-",
        "--layer",
        "0",
        "--head",
        "0",
        "--format",
        "npz",
        "-o",
        str(folder / "maps.npz"),
    ]
    return time_and_peak(text, command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    sizes = parser.parse_args().sizes
    peaks = {}
    with tempfile.TemporaryDirectory() as scratch:
        for tokens in sizes:
            figures = measure(tokens, Path(scratch))
            peaks[tokens] = figures["peak_mib"]
            print(
                f"{tokens:6} tokens: peak RSS {figures['peak_mib']:7.0f} MiB, "
                f"{figures['seconds']:5.1f} s"
            )
    if 4096 in peaks:
        print(f"4096 tokens: {peaks[4096]:.0f} MiB (target < 1536 MiB)")
        sys.exit(0 if peaks[4096] < 1536 else 1)


if __name__ == "__main__":
    main()
