"""``--select ilp`` against top and greedy on a real model's graph: from the same EAP
scores (the first PAIRS IOI pairs), the circuits of 0.1%, 1% and 10% of the edges each
selection chooses, their summed |score|, their faithfulness on those pairs, and how long
each selection takes (the selection alone; the scoring is shared).

    python -m benchmarks.ilp [--model smollm2] [--pairs 10]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import attnviz
from attnviz.circuits.selections import selected
from attnviz.inputs import Input

SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts"
FRACTIONS = (0.001, 0.01, 0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--pairs", type=int, default=10)
    arguments = parser.parse_args()
    lines = (SAMPLES / "ioi_pairs.jsonl").read_text(encoding="utf-8").splitlines()
    pairs = [Input(**json.loads(line)) for line in lines[: arguments.pairs]]
    extractor = attnviz.load(arguments.model)
    scored = extractor.circuit(pairs=pairs, edges=0, progress=False)
    count = scored.graph.count
    sizes = [int(fraction * count) for fraction in FRACTIONS]
    print(f"{arguments.model}: {count:,} edges, EAP over {len(pairs)} IOI pairs")
    print("| selection | edges asked | kept | summed |score| | faithfulness | selection time |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "scores.json"
        path.write_text(json.dumps(scored.document()), encoding="utf-8")
        for select in ("top", "greedy", "ilp"):
            timed = []
            for size in sizes:
                started = time.perf_counter()
                chosen = selected(scored.scored, select, size)
                timed.append((time.perf_counter() - started, chosen))
            measured = extractor.circuit(
                pairs=pairs, scores=str(path), select=select, edges=sizes[1],
                curve=[sizes[0], sizes[2]], progress=False,
            )  # fmt: skip
            faithful = {measured.asked: measured.faithfulness} | {
                point.asked: point.faithfulness for point in measured.curve
            }
            for size, (took, chosen) in zip(sizes, timed, strict=True):
                kept = float(np.abs(chosen.scores[chosen.circuit]).sum())
                print(
                    f"| {select} | {size:,} | {chosen.kept:,} | {kept:.3f} | "
                    f"{faithful[size]:.3f} | {took:.2f} s |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
