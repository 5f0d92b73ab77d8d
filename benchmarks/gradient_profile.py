"""Where the time of `heads --answer --method gradient` goes, against the floor any
gradient method has: one forward pass (inference), a plain forward and backward pass to
the input embeddings (no hooks, weights frozen), and attnviz's estimate with and without
recomputing layers in the backward pass; then torch's profiler over attnviz's estimate,
its operations by device time. Time and peak memory of each, in one process after a
warm-up.

    python benchmarks/gradient_profile.py --model smollm2 --tokens 8000 [--dtype bfloat16]
"""

from __future__ import annotations

import argparse

import torch
from effects import FACT_ANSWER, FACT_VERSUS, PeakMemory, timed, twins

import attnviz
from attnviz.pretrained import backward_pass


def _measured(name: str, work, device: torch.device) -> None:
    try:
        _timed(name, work, device)
    except torch.OutOfMemoryError:
        print(f"  {name:40} out of memory", flush=True)
        torch.cuda.empty_cache()


def _timed(name: str, work, device: torch.device) -> None:
    work()  # warm-up: kernels chosen, caches filled
    with PeakMemory(device) as memory:
        seconds, _ = timed(work)
    print(f"  {name:40} {seconds:7.3f} s  +{memory.above:.2f} GiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=8000)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--rows", type=int, default=25, help="profiler table rows")
    options = parser.parse_args()
    extractor = attnviz.load(options.model, load_options=attnviz.LoadOptions(dtype=options.dtype))
    model, tokenizer = extractor.loaded.model, extractor.loaded.tokenizer
    clean, _corrupt = twins(tokenizer, options.tokens)
    device = model.device
    ids = torch.tensor([tokenizer(clean)["input_ids"]], device=device)
    answer = tokenizer(clean + FACT_ANSWER)["input_ids"][ids.shape[1]]
    print(f"{options.model} ({model.dtype}), {ids.shape[1]} tokens, on {device}:")

    def forward() -> None:
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

    def forward_backward() -> None:
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        embedded = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=embedded, use_cache=False, logits_to_keep=1).logits
        (gradient,) = torch.autograd.grad(logits[0, -1, answer], embedded)
        float(gradient.sum())

    def estimate() -> None:
        extractor.head_effects(clean, FACT_ANSWER, versus=FACT_VERSUS, method="gradient")

    def kept() -> None:
        saved = backward_pass.KEPT_FOR_BACKWARD
        backward_pass.KEPT_FOR_BACKWARD = 2**62
        try:
            estimate()
        finally:
            backward_pass.KEPT_FOR_BACKWARD = saved

    _measured("forward (inference, last logits)", forward, device)
    _measured("plain forward + backward (no hooks)", forward_backward, device)
    _measured("attnviz estimate", estimate, device)
    _measured("attnviz estimate, no recomputation", kept, device)
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiled:
        estimate()
    order = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(
        profiled.key_averages().table(
            sort_by=order, row_limit=options.rows, max_name_column_width=48
        )
    )


if __name__ == "__main__":
    main()
