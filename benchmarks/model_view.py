"""Model-view pictures: as fast as the model work, in batches, in every format.

Targets (issue 15): `export --model minilm TEXT --view model -o x.png` at most 1.3x
`show --model minilm TEXT -f json` (the model work alone), measured side by side;
`batch --view model -f png --jobs 2` at least 2 MiniLM sentences/s (start-up
included); SVG and PDF at most 2x PNG; a 300-token model view under 1 GB.

    python benchmarks/model_view.py [--runs 5]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import medians

TEXT = "The animal didn't cross the street because it was too tired"
ATTNVIZ = [sys.executable, "-m", "attnviz"]
SENTENCES = Path(__file__).resolve().parents[1] / "sample_texts" / "sentences.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    folder = Path(tempfile.mkdtemp())
    show = "show --model minilm -f json"
    commands = {show: [*ATTNVIZ, "show", "--model", "minilm", TEXT, "-f", "json"]}
    for suffix in ("png", "svg", "pdf"):
        commands[f"export --view model -o x.{suffix}"] = [
            *ATTNVIZ, "export", "--model", "minilm", TEXT, "-o", str(folder / f"x.{suffix}"),
        ]  # fmt: skip
    median = medians(commands, runs)
    png = median["export --view model -o x.png"]
    print(f"export --view model (png) / show -f json = {png / median[show]:.2f}x (target <= 1.3x)")
    for suffix in ("svg", "pdf"):
        extra = median[f"export --view model -o x.{suffix}"] - median[show]
        ratio = extra / (png - median[show])
        print(
            f"{suffix} picture / png picture (model work subtracted) = {ratio:.2f}x (target <= 2x)"
        )

    # 40 different sentences: the sample sentences, each with a numbered ending
    base = [line for line in SENTENCES.read_text().splitlines() if line.strip()]
    lines = [f"{base[i % len(base)]} number {i}" for i in range(40)]
    source = folder / "inputs.txt"
    source.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    subprocess.run(
        [*ATTNVIZ, "batch", str(source), "-o", str(folder / "batch"), "--model", "minilm",
         "--view", "model", "-f", "png", "--jobs", "2", "-q"],
        check=True,
    )  # fmt: skip
    rate = len(lines) / (time.perf_counter() - start)
    print(
        f"batch --view model -f png --jobs 2: {rate:.2f} inputs/s over {len(lines)} "
        "MiniLM sentences, start-up included (target >= 2)"
    )

    long_text = " ".join(["word"] * 298)
    subprocess.run(
        [*ATTNVIZ, "export", "--model", "minilm", long_text, "-o", str(folder / "long.png")],
        check=True,
    )
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"largest peak RSS of these processes (300-token model view among them): {peak:.0f} MiB"
        " (target < 1024)"
    )


if __name__ == "__main__":
    main()
