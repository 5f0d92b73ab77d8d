"""`attnviz generate` against the plain transformers script it replaces.

Target (issue 13): at most 1.1x the time of a Python script that loads the same
model with eager attention and calls generate(output_attentions=True) on the same
prompt. attnviz generates with the key/value cache and no attention, then reads
every map in one extra forward pass. Both run alternately in one run, as whole
processes, on a small random GPT-2 built here (no download).

    python benchmarks/generate.py [--runs 9] [--new-tokens 40]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import medians

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import tiny_models

PROMPT = "The animal didn't cross the street because it was too tired"
PLAIN = f"""
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer
path, new = sys.argv[1], int(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
ids = tokenizer({PROMPT!r}, return_tensors="pt")
out = model.generate(**ids, max_new_tokens=new, do_sample=False, output_attentions=True,
                     return_dict_in_generate=True, pad_token_id=tokenizer.eos_token_id)
print(tokenizer.decode(out.sequences[0]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--new-tokens", type=int, default=40)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = str(tiny_models.gpt2(Path(folder) / "gpt2", n_positions=256, lm=True))
        new = str(arguments.new_tokens)
        script = "plain transformers generate(output_attentions=True)"
        ours = f"attnviz generate -n {new} -f json"
        commands = {
            script: [sys.executable, "-c", PLAIN, model, new],
            ours: [
                *(sys.executable, "-m", "attnviz", "generate", "--model", model, PROMPT),
                *("-n", new, "--no-stop", "-f", "json"),
            ],
        }
        median = medians(commands, arguments.runs)
    ratio = median[ours] / median[script]
    print(f"attnviz generate / plain script = {ratio:.2f}x (target <= 1.10x)")
    sys.exit(0 if ratio <= 1.1 else 1)


if __name__ == "__main__":
    main()
