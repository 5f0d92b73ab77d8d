"""Every trace site on one model, on its own device and dtype: the exact trace against a
reference from plain transformers hooks (tests/hook_references.py, none of attnviz's code),
the gradient estimate's Spearman correlation with the exact trace, and the time of each.
In bfloat16 (``--against float32``) each site is also compared with the float32 trace of
the same weights, loaded beside it.

    python benchmarks/sites.py MODEL [--dtype float32] [--against float32] [--reference]

MODEL: a folder or attnviz's name for one (smollm2). With random weights
(benchmarks/random_weights.py) the numbers compared are still the model's own.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

import attnviz

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.hook_references import reference_trace  # the repository's tests, put on the path

TEXT = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
ANSWER, VERSUS = " Mary", " John"
SITES = [
    ("resid", False),
    ("attn", False),
    ("resid_mid", False),
    ("mlp", False),
    ("resid_post", False),
    ("q", False),
    ("k", False),
    ("v", False),
    ("z", False),
    ("z", True),
    ("pattern", False),
]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks = [np.argsort(np.argsort(x.ravel())) for x in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


def timed(work):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    found = work()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, found


def traced(extractor, site: str, by_position: bool, method: str, words: argparse.Namespace):
    return extractor.trace(
        words.text,
        words.answer,
        words.corrupt,
        versus=words.versus,
        site=site,
        by_position=by_position,
        method=method,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--against", default=None, help="a second dtype to compare with")
    parser.add_argument("--reference", action="store_true", help="compare with plain hooks")
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--corrupt", default=CORRUPT)
    parser.add_argument("--answer", default=ANSWER)
    parser.add_argument("--versus", default=VERSUS)
    options = parser.parse_args()
    load = attnviz.LoadOptions(dtype=options.dtype)
    extractor = attnviz.load(options.model, load_options=load)
    against = None
    if options.against:
        against = attnviz.load(
            options.model, load_options=attnviz.LoadOptions(dtype=options.against)
        )
    model = extractor.loaded.model
    print(f"{options.model} on {model.device}, {options.dtype}; torch {torch.__version__}")
    tokenizer = extractor.loaded.tokenizer
    ids = [
        tokenizer(text, return_tensors="pt")["input_ids"].to(model.device)
        for text in (options.text, options.corrupt)
    ]
    alone = len(tokenizer(options.text, add_special_tokens=False)["input_ids"])
    answer, versus = (
        tokenizer(options.text + word, add_special_tokens=False)["input_ids"][alone]
        for word in (options.answer, options.versus)
    )
    traced(extractor, "resid", False, "exact", options)  # warm-up
    for site, by_position in SITES:
        name = site + (" by position" if by_position else "")
        exact_s, exact = timed(partial(traced, extractor, site, by_position, "exact", options))
        estimate_s, estimate = timed(
            partial(traced, extractor, site, by_position, "gradient", options)
        )
        line = (
            f"{name:16} {exact.effect.shape!s:14} exact {exact_s:6.2f} s, estimate "
            f"{estimate_s:5.2f} s, Spearman {spearman(exact.effect, estimate.effect):+.3f}"
        )
        if options.reference and not by_position and site != "pattern":
            expected = reference_trace(
                model, ids[0], ids[1], answer, versus, site, by_position=by_position
            )
            line += f", |exact - hooks| {np.abs(exact.effect - expected).max():.2e}"
        if against is not None:
            other = traced(against, site, by_position, "exact", options).effect
            share = np.abs(exact.effect - other).max() / np.abs(other).max()
            line += f", |{options.dtype} - {options.against}| {share:.2e} of the largest"
        print(line, flush=True)


if __name__ == "__main__":
    main()
