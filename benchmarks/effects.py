"""The ablation sweep of every SmolLM2 head (`heads --answer`) against a plain loop, side by
side in one process on the same loaded model.

The plain loop is what a notebook does with transformers alone: for each of the 270 heads, a
hook zeroes the head's slice of its output projection's input, and the whole model runs
once. attnviz batches heads (one per batch row) and starts each pass above the layers it
does not change. Both read the answer's log-probability; the benchmark checks they agree.
Target (issue 38): attnviz <= 0.5x the loop, on a short prompt and on a longer text.

`--long N` measures attribution patching at N tokens (issue 49) against one forward pass
of the same model and text (computing the last position's logits, as attnviz's passes do),
each in a process of its own (time, and peak memory above the loaded model: sampled from
/proc on the CPU, the device's peak allocation on a GPU): heads --answer --method gradient
(one forward and one backward pass), the same with --corrupt (a second pair, on the
corrupted text), trace --method gradient, and circuit --method gradient and --method ig
--steps 5 (every edge scored, the top 100 edges' faithfulness measured; the twins differ
in the fact's subject, near the end, and "circuit early twins" in the second token too,
so that every position's difference is kept); a plain
model(ids), every position's logits, is shown beside, the forward as attnviz's gradient
passes run it (a sliding-window layer over its window alone; the same as the forward
where the model has no such layer), and the floor any gradient method has: a plain
forward and backward pass (no hooks, weights frozen, every activation kept), each
estimate's time printed against it too. Target:
<= 3x the forward's time, <= its memory + 2 GB.
`--agreement N` ranks heads by the gradient estimate and by the exact sweep at N tokens
(Spearman, top-10 overlap), for ablation and for patch.

    python benchmarks/effects.py [--runs 3] [--tokens 256]
    python benchmarks/effects.py --long 8000 [--model smollm2] [--dtype bfloat16] [--what ...]
    python benchmarks/effects.py --agreement 1000
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import attnviz
from attnviz.pretrained.windowed import windowed

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
    if torch.cuda.is_available():  # a GPU runs on after the call returns: wait for it
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def compare(extractor, text: str, runs: int) -> None:
    model, tokenizer = extractor.loaded.model, extractor.loaded.tokenizer
    ids = torch.tensor([tokenizer(text)["input_ids"]], device=model.device)
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


SUBJECT, CORRUPT_SUBJECT = "The Eiffel Tower is in the city of", "The Colosseum is in the city of"
FACT_ANSWER, FACT_VERSUS = " Paris", " Rome"


def twins(tokenizer, tokens: int) -> tuple[str, str]:
    """A text of ``tokens`` tokens ending in the fact (or the nearest below that the
    tokenizer allows), and its corrupted twin (the subject changed, as many tokens). The
    filler is cut by tokens, decoded and encoded again, which can merge tokens: the cut
    is searched for rather than guessed."""
    unit = len(tokenizer(FILLER, add_special_tokens=False)["input_ids"])
    # Twice the tokens asked for: encoded again, a cut of the filler can come out shorter.
    filler = tokenizer(FILLER * (2 * tokens // unit + 2), add_special_tokens=False)["input_ids"]

    def length(count: int) -> int:
        return len(tokenizer(tokenizer.decode(filler[:count]) + " " + SUBJECT)["input_ids"])

    low, high = 0, len(filler)
    while low < high:  # the most filler tokens whose text stays within ``tokens``
        middle = (low + high + 1) // 2
        low, high = (middle, high) if length(middle) <= tokens else (low, middle - 1)
    words = tokenizer.decode(filler[:low])
    return words + " " + SUBJECT, words + " " + CORRUPT_SUBJECT


class PeakMemory:
    """The largest resident set of this process while open, above what it held at the start,
    sampled every 5 ms from /proc/self/statm; on a GPU, the device's peak allocation instead
    (what the model's activations take there)."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"

    def __enter__(self) -> PeakMemory:
        import os
        import threading

        if self._cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = self.peak = torch.cuda.memory_allocated()
            return self
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.start = self.peak = self._rss()
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _rss(self) -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * self._page

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.005)

    def __exit__(self, *_exc: object) -> None:
        if self._cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
            return
        self._running = False
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def above(self) -> float:
        return (self.peak - self.start) / 2**30


MEASURED = (
    "forward",
    "forward, all logits",
    "forward, by windows",
    "forward + backward",
    "heads gradient",
    "heads --corrupt",
    "trace gradient",
    "circuit gradient",
    "circuit ig",
    "circuit early twins",
)


def _measure(what: str, model: str, dtype: str, tokens: int) -> tuple[float, float, int]:
    """In a fresh process: seconds and GiB above the loaded model for one measurement. On a
    GPU the work runs once untimed first (kernels chosen and compiled, as any long job
    amortises), then once timed."""
    extractor = attnviz.load(model, load_options=attnviz.LoadOptions(dtype=dtype))
    loaded = extractor.loaded
    clean, corrupt = twins(loaded.tokenizer, tokens)
    device = loaded.model.device
    ids = torch.tensor([loaded.tokenizer(clean)["input_ids"]], device=device)

    def forward(**keep: int) -> None:
        with torch.inference_mode():
            loaded.model(input_ids=ids, use_cache=False, **keep)

    def forward_backward() -> None:
        """The floor of any gradient method: one forward and one backward pass to the input
        embeddings, no hooks, weights frozen, every activation kept."""
        for parameter in loaded.model.parameters():
            parameter.requires_grad_(False)
        embedded = loaded.model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = loaded.model(inputs_embeds=embedded, use_cache=False, logits_to_keep=1).logits
        (gradient,) = torch.autograd.grad(logits[0, -1].float().log_softmax(-1)[0], embedded)
        float(gradient.sum())

    work = {
        # The logits at the last position alone, all that a metric reads (what attnviz's
        # own passes compute); "all logits" is a plain model(ids), every position's.
        "forward": lambda: forward(logits_to_keep=1),
        "forward, all logits": forward,
        # What attnviz's gradient passes run: a sliding-window layer over its window alone.
        "forward, by windows": lambda: _by_windows(loaded.model, ids),
        "forward + backward": forward_backward,
        "heads gradient": lambda: extractor.head_effects(
            clean, FACT_ANSWER, versus=FACT_VERSUS, method="gradient"
        ),
        "heads --corrupt": lambda: extractor.head_effects(
            clean, FACT_ANSWER, versus=FACT_VERSUS, corrupt=corrupt, method="gradient"
        ),
        "trace gradient": lambda: extractor.trace(
            clean, FACT_ANSWER, corrupt, versus=FACT_VERSUS, method="gradient"
        ),
        # The whole command: both runs read, the scores, the faithfulness pass of the
        # circuit of the top 100 edges (two rows: the corrupted run beside the circuit's).
        "circuit gradient": lambda: extractor.circuit(
            clean, FACT_ANSWER, corrupt, versus=FACT_VERSUS, method="gradient"
        ),
        "circuit ig": lambda: extractor.circuit(
            clean, FACT_ANSWER, corrupt, versus=FACT_VERSUS, method="ig", steps=5
        ),
        # The twins differing from the filler's second word on too: every position's
        # difference is recorded (else only those from the first differing token on).
        "circuit early twins": lambda: extractor.circuit(
            clean, FACT_ANSWER, _early(corrupt), versus=FACT_VERSUS, method="gradient"
        ),
    }[what]
    if device.type == "cuda":
        work()
    with PeakMemory(device) as memory:
        seconds, _ = timed(work)
    return seconds, memory.above, ids.shape[1]


def _early(corrupt: str) -> str:
    """The corrupted twin changed in its first words as well (the filler's "old": "new",
    a token for a token)."""
    assert corrupt.startswith("The old ")
    return "The new " + corrupt.removeprefix("The old ")


def _by_windows(model, ids: torch.Tensor) -> None:
    with windowed(model, {"input_ids": ids}), torch.inference_mode():
        model(input_ids=ids, use_cache=False, logits_to_keep=1)


def long_contexts(model: str, dtype: str, tokens: int, asked: list[str]) -> None:
    """Each measurement printed as it is made: a run cut short keeps what it measured.
    ``asked`` chooses among the measurements (the forward, the baseline, always runs)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    baseline: tuple[float, float] | None = None
    floor = 0.0  # the plain forward and backward pass's seconds
    for what in MEASURED:
        if what != "forward" and asked and what not in asked:
            continue
        with context.Pool(1) as pool:
            try:
                took, used, length = pool.apply(_measure, (what, model, dtype, tokens))
            except Exception as error:  # one failed measurement must not lose the others
                print(f"  {what}: failed: {type(error).__name__}: {error}", flush=True)
                continue
        if baseline is None:
            device = "a GPU" if torch.cuda.is_available() else "the CPU"
            print(f"{model} ({dtype}), {length} tokens, on {device}:")
            print(f"  {what:20} {took:7.2f} s, +{used:.2f} GiB (the baseline)", flush=True)
            baseline = took, used
            continue
        seconds, memory = baseline
        target, pair = "", ""
        if what == "forward + backward":
            floor = took
        elif not what.startswith("forward"):
            target = " (target <= 3x, <= + 2 GB)"
            pair = f", {took / floor:.2f}x the plain pair" if floor else ""
        print(
            f"  {what:20} {took:7.2f} s = {took / seconds:.2f}x the forward{pair}; "
            f"+{used:.2f} GiB = the forward's + {used - memory:.2f} GiB{target}",
            flush=True,
        )


def agreement(model: str, tokens: int) -> None:
    """How the gradient estimate ranks heads against the exact sweep."""
    from scipy.stats import spearmanr

    extractor = attnviz.load(model)
    clean, corrupt = twins(extractor.loaded.tokenizer, tokens)
    asked = {"versus": FACT_VERSUS, "corrupt": corrupt}
    seconds, exact = timed(lambda: extractor.head_effects(clean, FACT_ANSWER, **asked))
    estimate_seconds, estimate = timed(
        lambda: extractor.head_effects(clean, FACT_ANSWER, method="gradient", **asked)
    )
    length = len(extractor.loaded.tokenizer(clean)["input_ids"])
    print(f"{model}, {length} tokens: exact {seconds:.1f} s, gradient {estimate_seconds:.1f} s")
    for name in ("ablation", "patch"):
        truth, guess = getattr(exact, name).ravel(), getattr(estimate, name).ravel()
        top = set(np.argsort(-np.abs(truth))[:10]) & set(np.argsort(-np.abs(guess))[:10])
        rho = spearmanr(truth, guess).statistic
        print(f"  {name:8} Spearman {rho:.3f}, top-10 by magnitude shared {len(top)}/10")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256, help="the longer text's length")
    parser.add_argument("--long", type=int, metavar="N", help="attribution patching at N tokens")
    parser.add_argument("--agreement", type=int, metavar="N", help="gradient vs exact at N tokens")
    parser.add_argument("--model", default="smollm2", help="an alias or a model folder")
    parser.add_argument("--dtype", default="auto", help="the weights' dtype (--long)")
    parser.add_argument(
        "--what", default="", help="--long's measurements, comma-separated (all by default)"
    )
    options = parser.parse_args()
    torch.manual_seed(0)
    if options.long:
        asked = [what for what in options.what.split(",") if what]
        unknown = sorted(set(asked) - set(MEASURED))
        if unknown:
            parser.error(f"unknown --what {', '.join(unknown)}: one of {', '.join(MEASURED)}")
        long_contexts(options.model, options.dtype, options.long, asked)
        return
    if options.agreement:
        agreement(options.model, options.agreement)
        return
    extractor = attnviz.load(options.model)
    compare(extractor, PROMPT, options.runs)
    tokenizer = extractor.loaded.tokenizer
    filler = FILLER * (options.tokens // len(tokenizer(FILLER)["input_ids"]) + 1)
    words = tokenizer.decode(tokenizer(filler)["input_ids"][: options.tokens - 6])
    compare(extractor, words + " " + PROMPT, options.runs)


if __name__ == "__main__":
    main()
