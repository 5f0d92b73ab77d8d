"""The gradient estimates with a sliding-window layer's attention computed over its window
alone (as attnviz computes them) against over the whole text with the model's T x T mask
(the model's own fused path, attnviz before), side by side in one process on the same
loaded model and texts: time, peak memory above the model, and the largest difference of
each estimate (ablation, patch: `heads --answer --corrupt --method gradient`; the resid
trace) relative to its largest value. Each is run once untimed first, then the two take
turns.

    python benchmarks/windows.py --model gemma3 --tokens 4096 [--dtype bfloat16] [--runs 2]
"""

from __future__ import annotations

import argparse
import statistics
from unittest import mock

import numpy as np
import torch
from effects import FACT_ANSWER, FACT_VERSUS, PeakMemory, timed, twins

import attnviz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--runs", type=int, default=2)
    options = parser.parse_args()
    extractor = attnviz.load(options.model, load_options=attnviz.LoadOptions(dtype=options.dtype))
    clean, corrupt = twins(extractor.loaded.tokenizer, options.tokens)
    device = extractor.loaded.model.device
    length = len(extractor.loaded.tokenizer(clean)["input_ids"])
    window = extractor.loaded.model.config.sliding_window

    def estimates() -> list[np.ndarray]:
        heads = extractor.head_effects(
            clean, FACT_ANSWER, versus=FACT_VERSUS, corrupt=corrupt, method="gradient"
        )
        traced = extractor.trace(clean, FACT_ANSWER, corrupt, versus=FACT_VERSUS, method="gradient")
        return [heads.ablation, heads.patch, traced.effect]

    def masked() -> list[np.ndarray]:
        with mock.patch("attnviz.pretrained.windowed.applies", return_value=False):
            return estimates()

    ways = {"by windows": estimates, "masked": masked}
    found = {name: way() for name, way in ways.items()}  # untimed: kernels chosen, caches
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    memory: dict[str, float] = {}
    for _ in range(options.runs):
        for name, way in ways.items():
            with PeakMemory(device) as peak:
                took, _ = timed(way)
            seconds[name].append(took)
            memory[name] = max(memory.get(name, 0.0), peak.above)
    print(
        f"{options.model} ({extractor.loaded.model.dtype}), {length} tokens, window {window}, "
        f"on {device}; heads --corrupt and trace, both --method gradient, {options.runs} runs:"
    )
    for name in ways:
        median = statistics.median(seconds[name])
        print(f"  {name:11} median {median:8.2f} s, +{memory[name]:.2f} GiB")
    ratio = statistics.median(seconds["by windows"]) / statistics.median(seconds["masked"])
    print(f"  by windows / masked: {ratio:.2f}x the time")
    for name, by_windows, whole in zip(
        ("ablation", "patch", "trace"), found["by windows"], found["masked"], strict=True
    ):
        largest = float(np.abs(whole).max())
        difference = float(np.abs(by_windows - whole).max())
        print(f"  {name:8} largest difference {difference:.1e} (of {largest:.3g})")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
