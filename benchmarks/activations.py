"""`attnviz acts` at length against the model's own forward pass, side by side in one run:
each a fresh process on the same text (sample_texts/haystack.txt, repeated and cut to N
tokens), its wall time and peak RSS. acts reads every layer's residual stream and every
head's output (--site resid_post --site z) at the last position and writes them as npz;
the plain pass is the model's own forward with no hook, the last logits alone. Target
(issue #87): the activations of a long text fit where the model's own pass does (only the
positions asked are kept), so acts' peak stays within the plain pass's plus its arrays.

Each size runs with one torch thread and with every core (OMP_NUM_THREADS, both processes).

    python benchmarks/activations.py [--model smollm2] [--tokens 1000 4000 8000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from common import time_and_peak

HAYSTACK = Path(__file__).resolve().parent.parent / "sample_texts" / "haystack.txt"

# The model's own forward on stdin's text: loaded as attnviz loads it, no hook installed.
_PLAIN = """
import sys, torch, attnviz
loaded = attnviz.load(sys.argv[1]).loaded
encoded = loaded.tokenizer(sys.stdin.read(), return_tensors="pt")
with torch.inference_mode():
    loaded.model(**encoded, use_cache=False, logits_to_keep=1)
"""


def _text(tokens: int, folder: Path, model: str) -> Path:
    """The haystack repeated and cut to ``tokens`` tokens of the model's tokenizer."""
    import attnviz

    tokenizer = attnviz.load(model).loaded.tokenizer
    haystack = HAYSTACK.read_text(encoding="utf-8")
    ids = tokenizer(haystack * (tokens // 900 + 2), add_special_tokens=False)["input_ids"]
    path = folder / f"text-{tokens}.txt"
    path.write_text(tokenizer.decode(ids[: tokens - 1]), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1000, 4000, 8000])
    arguments = parser.parse_args()
    print(f"{arguments.model}; load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as folder:
        for tokens in arguments.tokens:
            text = _text(tokens, Path(folder), arguments.model)
            for threads in (1, os.cpu_count() or 1):
                os.environ["OMP_NUM_THREADS"] = str(threads)
                plain = time_and_peak(text, [sys.executable, "-c", _PLAIN, arguments.model])
                saved = Path(folder) / "acts.npz"
                acts = [sys.executable, "-m", "attnviz", "acts", "@-", "--model"]
                acts += [arguments.model, "--site", "resid_post", "--site", "z", "--rows"]
                found = time_and_peak(text, [*acts, "last", "-f", "npz", "-o", str(saved)])
                print(
                    f"{tokens:>6} tokens, {threads} thread{'s' * (threads > 1)}: plain forward "
                    f"{plain['seconds']:6.1f} s {plain['peak_mib']:6.0f} MiB; acts "
                    f"{found['seconds']:6.1f} s {found['peak_mib']:6.0f} MiB: "
                    f"{found['seconds'] / plain['seconds']:.2f}x the time, "
                    f"{found['peak_mib'] - plain['peak_mib']:+.0f} MiB"
                )


if __name__ == "__main__":
    main()
