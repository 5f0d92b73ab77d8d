"""`attnviz pairs check` against the forward passes it needs, side by side in one run: a
dataset's pairs checked (each text and its twin tokenized as circuit reads them, one
forward pass of each, the answer's rank and the metric read) beside a plain loop of the
model's own forward passes on the same texts (the last position's logits alone, as the
check reads them), with one torch thread and with torch's default. Target (issue #86):
the check within 2x the plain passes, one pass a text.

    python benchmarks/pairs_check.py [--model smollm2] [--pairs sample_texts/ioi_pairs.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--pairs", default=str(SAMPLES / "ioi_pairs.jsonl"))
    arguments = parser.parse_args()
    import torch

    import attnviz
    from attnviz.circuits.pair_checks import checked_pairs

    lines = Path(arguments.pairs).read_text(encoding="utf-8").splitlines()
    pairs = [json.loads(line) for line in lines if line.strip()]
    extractor = attnviz.load(arguments.model)
    model, tokenizer = extractor.loaded.model, extractor.loaded.tokenizer
    texts = [text for pair in pairs for text in (pair["text"], pair["corrupt"])]
    default = torch.get_num_threads()
    print(f"{len(pairs)} pairs of {arguments.pairs} on {arguments.model}; load {os.getloadavg()}")
    for threads in (1, default):
        torch.set_num_threads(threads)
        checked_pairs(extractor, pairs[:1])  # the first pass's warm-up, for both
        started = time.perf_counter()
        found = checked_pairs(extractor, pairs)
        check = time.perf_counter() - started
        started = time.perf_counter()
        with torch.inference_mode():
            for text in texts:
                encoded = tokenizer(text, return_tensors="pt").to(model.device)
                model(**encoded, use_cache=False, logits_to_keep=1)  # the next token's alone
        plain = time.perf_counter() - started
        print(
            f"{threads} thread{'s' * (threads > 1)}: pairs check {check:.2f} s, the plain "
            f"forward passes {plain:.2f} s: {check / plain:.2f}x "
            f"({len(found.refused)} refused, {found.preferred} preferred)"
        )


if __name__ == "__main__":
    main()
