"""The same model on the CPU and on a GPU, side by side: the attention maps, every head's
effects (exact and estimated) and the trace, with the largest difference between the two
devices of each, as a fraction of the largest value. A check for a machine with a GPU:
the tests run on the CPU only.

    python benchmarks/devices.py [--model smollm2] [--tokens 30] [--dtype float32]
"""

from __future__ import annotations

import argparse

import numpy as np
from effects import FACT_ANSWER, FACT_VERSUS, twins

import attnviz


def _difference(name: str, cpu: np.ndarray, gpu: np.ndarray) -> None:
    largest = float(np.abs(cpu).max()) or 1.0
    difference = float(np.abs(cpu.astype(np.float64) - gpu).max())
    print(f"  {name:18} largest |cpu - gpu| {difference:.2e} = {difference / largest:.1e} of max")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="an alias or a model folder")
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--device", default="cuda", help="the device compared with the CPU")
    parser.add_argument("--dtype", default="float32", help="the GPU's weights' dtype")
    options = parser.parse_args()
    cpu = attnviz.load(options.model, load_options=attnviz.LoadOptions(device="cpu"))
    gpu = attnviz.load(
        options.model, load_options=attnviz.LoadOptions(device=options.device, dtype=options.dtype)
    )
    clean, corrupt = twins(cpu.loaded.tokenizer, options.tokens)
    asked = {"versus": FACT_VERSUS, "corrupt": corrupt}
    print(f"{options.model}, {options.tokens} tokens, the GPU in {options.dtype}:")
    _difference("maps", cpu.extract(clean).weights, gpu.extract(clean).weights)
    for method in ("exact", "gradient"):
        on_cpu = cpu.head_effects(clean, FACT_ANSWER, method=method, **asked)
        on_gpu = gpu.head_effects(clean, FACT_ANSWER, method=method, **asked)
        for column in ("ablation", "dla", "patch"):
            _difference(f"{column} ({method})", getattr(on_cpu, column), getattr(on_gpu, column))
        for site in ("resid", "attn", "mlp"):
            traced = {"versus": FACT_VERSUS, "site": site, "method": method}
            _difference(
                f"trace {site} ({method})",
                cpu.trace(clean, FACT_ANSWER, corrupt, **traced).effect,
                gpu.trace(clean, FACT_ANSWER, corrupt, **traced).effect,
            )


if __name__ == "__main__":
    main()
