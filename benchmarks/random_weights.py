"""A model folder with a real model's configuration and tokenizer and seeded random
weights, for timing and memory where the real weights cannot travel (a GPU machine reached
through a 64 MiB transfer: Gemma 3 270M's converted weights are 1 GB).

A forward or backward pass does the same work, and keeps the same tensors, whatever the
weights' values: the figures measured on such a folder are the real model's. Rankings of
heads, or anything else read from the values, are not.

    python benchmarks/random_weights.py SOURCE TARGET [--seed 0]

SOURCE holds config.json and the tokenizer's files (a folder converted by attnviz, say,
~/.cache/huggingface/attnviz/models/gemma3-1.0.0, without its model.safetensors).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

COPIED = (
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    torch.manual_seed(options.seed)
    config = AutoConfig.from_pretrained(options.source)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(options.target)
    for name in COPIED:
        if (options.source / name).is_file():
            shutil.copy(options.source / name, options.target / name)
    print(f"{options.target}: {config.architectures[0]}, random weights (seed {options.seed})")


if __name__ == "__main__":
    main()
