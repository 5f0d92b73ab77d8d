"""Peak memory and time of `attnviz show` on long inputs of the built-in stack.

Target (issue 7): a 4,096-token input with --layer 0 --head 0 --format npz
completes with a peak RSS under 1.5 GB: maps of layers and heads that were not
asked for are never held, and work stops after the last layer asked for.

Each size runs in a fresh process whose children's peak RSS is read back.

``--formats``: every map of a 2,048-token input written as npz, json, ndjson and csv,
side by side. Target (issue 39): the text formats within 1.2x npz's peak, since they
are written a row of weights at a time (as a whole, text took 20-90x the weights).

    python benchmarks/memory.py [--sizes 512 1024 2048 4096] [--formats]
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


def measure(tokens: int, folder: Path, *options: str, output: str = "npz") -> dict[str, float]:
    text = folder / f"text-{tokens}.txt"
    text.write_text(" ".join(random.Random(tokens).choice(WORDS) for _ in range(tokens)) + "\n")
    written = folder / f"maps.{output}"
    command = [sys.executable, "-m", "attnviz", "show", "-", *options, "-o", str(written)]
    figures = time_and_peak(text, command)
    written.unlink()
    return figures


def formats(folder: Path, tokens: int = 2048) -> bool:
    """Every map of one input in each data format; True when the target holds."""
    peaks = {}
    for output in ("npz", "json", "ndjson", "csv"):
        figures = measure(tokens, folder, output=output)
        peaks[output] = figures["peak_mib"]
        ratio = peaks[output] / peaks["npz"]
        print(
            f"{tokens} tokens, every map as {output:6}: peak RSS {peaks[output]:5.0f} MiB "
            f"({ratio:.2f}x npz), {figures['seconds']:5.1f} s"
        )
    return all(peak <= 1.2 * peaks["npz"] for peak in peaks.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--formats", action="store_true", help="the data formats' memory")
    arguments = parser.parse_args()
    if arguments.formats:
        with tempfile.TemporaryDirectory() as scratch:
            held = formats(Path(scratch))
        print("text formats within 1.2x npz:", "ok" if held else "MISSED")
        sys.exit(0 if held else 1)
    peaks = {}
    with tempfile.TemporaryDirectory() as scratch:
        for tokens in arguments.sizes:
            figures = measure(tokens, Path(scratch), "--layer", "0", "--head", "0")
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
