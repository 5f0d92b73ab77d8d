"""The ablation sweep of every SmolLM2 head (`heads --answer`) against a plain loop, side by
side in one process on the same loaded model.

The plain loop is what a notebook does with transformers alone: for each of the 270 heads, a
hook zeroes the head's slice of its output projection's input, and the whole model runs
once. attnviz batches heads (one per batch row) and starts each pass above the layers it
does not change. Both read the answer's log-probability; the benchmark checks they agree.
Target (issue 38): attnviz <= 0.5x the loop, on a short prompt and on a longer text.

    python benchmarks/effects.py [--runs 3] [--tokens 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import attnviz

PROMPT = "The capital of France is"
ANSWER = " Paris"
FILLER = (
    "The old lighthouse keeper walked along the shore every morning, counting the boats "
    "that came back from the sea and writing their names in a small notebook. "
)


def plain_sweep(model, ids: torch.Tensor, answer_id: int) -> np.ndarray:
    """One whole forward per head, a hook zeroing the head's slice: (L, H) effects."""
    config = model.config
    size = config.hidden_size // config.num_attention_heads

    def log_prob() -> float:
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0, -1]
        return float(logits.float().log_softmax(-1)[answer_id])

    clean = log_prob()
    effects = np.zeros((config.num_hidden_layers, config.num_attention_heads))
    for layer, block in enumerate(model.model.layers):
        for head in range(config.num_attention_heads):

            def zero(_module, args, part=slice(head * size, (head + 1) * size)):
                changed = args[0].clone()
                changed[..., part] = 0
                return (changed,)

            handle = block.self_attn.o_proj.register_forward_pre_hook(zero)
            try:
                effects[layer, head] = log_prob() - clean
            finally:
                handle.remove()
    return effects


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def compare(extractor, text: str, runs: int) -> None:
    model, tokenizer = extractor.loaded.model, extractor.loaded.tokenizer
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    answer_id = tokenizer(text + ANSWER)["input_ids"][ids.shape[1]]
    times: dict[str, list[float]] = {"attnviz": [], "plain": []}
    for _ in range(runs):  # taking turns, so that both share the machine's state
        seconds, effects = timed(lambda: extractor.head_effects(text, ANSWER))
        times["attnviz"].append(seconds)
        seconds, expected = timed(lambda: plain_sweep(model, ids, answer_id))
        times["plain"].append(seconds)
    difference = np.abs(effects.ablation - expected).max()
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"{ids.shape[1]} tokens, {expected.size} heads, {runs} runs (largest difference "
        f"{difference:.1e} nats)"
    )
    print(f"  plain loop, one forward per head   median {medians['plain']:7.2f} s")
    print(f"  attnviz head_effects (ablation+dla) median {medians['attnviz']:7.2f} s")
    print(f"  ratio attnviz / plain: {medians['attnviz'] / medians['plain']:.2f}x (target <= 0.5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256, help="the longer text's length")
    options = parser.parse_args()
    torch.manual_seed(0)
    extractor = attnviz.load("smollm2")
    compare(extractor, PROMPT, options.runs)
    tokenizer = extractor.loaded.tokenizer
    filler = FILLER * (options.tokens // len(tokenizer(FILLER)["input_ids"]) + 1)
    words = tokenizer.decode(tokenizer(filler)["input_ids"][: options.tokens - 6])
    compare(extractor, words + " " + PROMPT, options.runs)


if __name__ == "__main__":
    main()
