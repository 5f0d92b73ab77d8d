"""SmolLM2 (`--model smollm2`) against plain transformers scripts, side by side.

Loads: attnviz's first load (the GGUF file converted into the cache), its later
loads (the converted folder), and a plain script loading the GGUF file, each in a
fresh process. Targets (issue 27): later loads <= 0.5x the plain GGUF load.

Commands: `show`, `heads --detect induction` and `generate -n 40`, each against a
plain script doing the same work from the same converted folder (eager attention,
output_attentions, the same outputs written). Target: each <= 1.1x its script.

    python benchmarks/smollm2.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import medians

TEXT = "The quick brown fox jumps over the lazy dog because it was in a hurry to get home."
PROMPT = "Once upon a time, in a small village by the sea,"

GGUF_LOAD = """
from transformers import AutoModelForCausalLM, AutoTokenizer
from attnviz.pretrained.loading import ALIASES
gguf = ALIASES["smollm2"].packaged.located()
AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
"""
ATTNVIZ_LOAD = "import attnviz; attnviz.load('smollm2')"

# The plain scripts: argv[1] the converted folder, argv[2] the output file.
_PLAIN_LOAD = """
import sys, json, numpy as np, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, output = sys.argv[1], sys.argv[2]
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
def attentions(ids):
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return torch.stack([layer[0] for layer in out.attentions]).numpy()
"""
PLAIN_SHOW = (
    _PLAIN_LOAD
    + f"""
np.savez(output, weights=attentions(tokenizer({TEXT!r})["input_ids"]))
"""
)
PLAIN_DETECT = (
    _PLAIN_LOAD
    + """
ids = tokenizer(sys.argv[3])["input_ids"]
maps = attentions(ids)
tokens = np.asarray(ids)
size = len(ids)
same = np.equal.outer(tokens, tokens).astype(float)
np.fill_diagonal(same, 0)
duplicate = np.tril(same)
previous = np.zeros((size, size)); previous[1:, :-1] = np.eye(size - 1)
induction = np.tril(np.concatenate([np.zeros((size, 1)), duplicate[:, :-1]], axis=1))
rows = []
for layer, heads in enumerate(maps):
    for head, attention in enumerate(heads.astype(np.float64)):
        attention[:, 0] = 0
        mass = attention.sum()
        scores = [float((attention * p).sum() / mass) for p in (previous, duplicate, induction)]
        rows.append({"layer": layer, "head": head, "induction": scores[2]})
rows.sort(key=lambda row: -row["induction"])
open(output, "w").write(json.dumps(rows[:5]))
"""
)
PLAIN_GENERATE = (
    _PLAIN_LOAD
    + f"""
ids = tokenizer({PROMPT!r}, return_tensors="pt")["input_ids"]
with torch.no_grad():
    written = model.generate(ids, max_new_tokens=40, min_new_tokens=40, do_sample=False)
print(tokenizer.decode(written[0, ids.shape[1]:]), file=sys.stderr)
np.savez(output, weights=attentions(written[0].tolist()))
"""
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    python = sys.executable
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "hf"
        os.environ["HF_HOME"] = str(home)

        first = "attnviz first load (converts)"
        loads = medians(
            {
                "plain script loading the GGUF file": [python, "-c", GGUF_LOAD],
                first: ["sh", "-c", f'rm -rf {home} && {python} -c "{ATTNVIZ_LOAD}"'],
            },
            runs,
        )
        later = medians({"attnviz later load": [python, "-c", ATTNVIZ_LOAD]}, runs)
        folder = json.loads(
            subprocess.run(
                [python, "-m", "attnviz", "models", "-f", "json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["models"]
        (converted,) = [model["location"] for model in folder if model["name"] == "smollm2"]
        probe = subprocess.run(
            [python, "-c", "import attnviz; print(attnviz.load('smollm2').detection_probe())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        out = Path(scratch)
        attnviz = [python, "-m", "attnviz"]
        model = ["--model", "smollm2"]
        pairs = {
            "show": (
                [*attnviz, "show", *model, TEXT, "-f", "npz", "-o", str(out / "a.npz")],
                [python, "-c", PLAIN_SHOW, converted, str(out / "p.npz")],
            ),
            "heads --detect induction": (
                [*attnviz, "heads", *model, "--detect", "induction", "--top", "5", "-f", "json"],
                [python, "-c", PLAIN_DETECT, converted, str(out / "p.json"), probe],
            ),
            "generate -n 40": (
                [
                    *attnviz,
                    "generate",
                    *model,
                    PROMPT,
                    "-n",
                    "40",
                    "--no-stop",
                    "-f",
                    "npz",
                    "-o",
                    str(out / "g.npz"),
                ],
                [python, "-c", PLAIN_GENERATE, converted, str(out / "pg.npz")],
            ),
        }
        ratios = {}
        for name, (ours, plain) in pairs.items():
            timed = medians({f"attnviz {name}": ours, f"plain script: {name}": plain}, runs)
            ratios[name] = timed[f"attnviz {name}"] / timed[f"plain script: {name}"]
    gguf = loads["plain script loading the GGUF file"]
    print(f"first load (conversion) / plain GGUF load = {loads[first] / gguf:.2f}x")
    later_ratio = later["attnviz later load"] / gguf
    print(f"later load / plain GGUF load = {later_ratio:.2f}x (target <= 0.50x)")
    for name, ratio in ratios.items():
        print(f"{name} / its plain script = {ratio:.2f}x (target <= 1.10x)")


if __name__ == "__main__":
    main()
