"""How closely EAP, EAP-IG and RelP track exact patching on a real model: each method
scores every edge over a task's pairs; the union of the methods' top K edges (by |score|)
is computed exactly (each edge alone carrying the corrupted value, the change in the
metric); Pearson and Spearman of each estimate against the exact scores, on that union
and on the method's own top K, and what each estimate costs (after a first pass, untimed).
RelP is measured twice: with every rule of its table (``--method relp``) and with
attention's weights unheld (its code's default rules).
Every edge of a small model: ``--top`` past its edge count.

Tasks: ``ioi`` (the first --pairs pairs of sample_texts/ioi_pairs.jsonl) and ``needle``
(one pair of about a thousand tokens cut from sample_texts/haystack.txt around its needle,
"The secret code is 7421." against "… 3958.", the question at the end).

    python -m benchmarks.relp [--model smollm2] [--tasks ioi,needle] [--pairs 5] [--top 1000]
        [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import attnviz
from attnviz.choices import CircuitMethod
from attnviz.circuits import estimates
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.passes import Here
from attnviz.inputs import Input
from attnviz.pretrained.relevance import RELP, Rule
from attnviz.request import Request

SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts"
NEEDLE, TWIN = "7421", "3958"
AROUND = 2_200  # characters of filler kept on each side of the needle: ~1,000 tokens in all
QUESTION = "What is the secret code?"
METHODS = {"EAP": CircuitMethod.GRADIENT, "EAP-IG": CircuitMethod.IG, "RelP": CircuitMethod.RELP}
# RelP's code's default rules (its README's example and its demo) leave attention's
# weights unheld: a row of its own, RelP's passes with those three rules
WITHOUT_AH = "RelP, weights unheld"


def _ioi(count: int) -> list[Input]:
    lines = (SAMPLES / "ioi_pairs.jsonl").read_text(encoding="utf-8").splitlines()
    return [Input(**json.loads(line)) for line in lines[:count]]


def _needle() -> list[Input]:
    """The haystack's needle with AROUND characters of filler each side (whole sentences),
    the question, and "The secret code is " to be answered by the code's first digit (a
    token of its own after the space, as SmolLM2 splits digits)."""
    haystack = (SAMPLES / "haystack.txt").read_text(encoding="utf-8")
    at = haystack.index(f"The secret code is {NEEDLE}.")
    start = haystack.index(". ", max(0, at - AROUND)) + 2
    stop = haystack.index(". ", at + AROUND) + 1
    text = f"{haystack[start:stop]} {QUESTION} The secret code is "
    corrupt = text.replace(NEEDLE, TWIN)
    return [Input(text=text, corrupt=corrupt, answer=NEEDLE[0], versus=TWIN[0])]


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    return ranks


def _agreement(estimate: np.ndarray, exact: np.ndarray) -> tuple[float, float]:
    """Pearson and Spearman (the Pearson of the ranks; ties are not expected) of two score
    vectors."""
    pearson = float(np.corrcoef(estimate, exact)[0, 1])
    spearman = float(np.corrcoef(_ranks(estimate), _ranks(exact))[0, 1])
    return pearson, spearman


def _top(scores: np.ndarray, edges: np.ndarray, count: int) -> set[tuple[int, int]]:
    upstream, downstream = np.nonzero(edges)
    order = np.argsort(-np.abs(scores[upstream, downstream]), kind="stable")[:count]
    return {(int(upstream[k]), int(downstream[k])) for k in order}


def task(extractor, name: str, pairs: list[Input], top: int, steps: int) -> None:
    # refine asked: the pairs' records keep the layers' outputs the exact passes start from
    options = CircuitOptions(refine=top)
    phases = Here(extractor, Request(maps=False, circuit=options), pairs, None)
    phases.checked()
    graph = phases.graph()
    phases.scored(CircuitMethod.GRADIENT, None, None)  # a first pass, untimed: warm
    scores, took = {}, {}
    for label, method in METHODS.items():
        started = time.perf_counter()
        summed = phases.scored(method, steps if method is CircuitMethod.IG else None, None)
        took[label] = time.perf_counter() - started
        scores[label] = summed.scores / len(pairs)
    estimates._RULES[CircuitMethod.RELP] = RELP - {Rule.ATTENTION}
    try:
        started = time.perf_counter()
        summed = phases.scored(CircuitMethod.RELP, None, None)
        took[WITHOUT_AH] = time.perf_counter() - started
        scores[WITHOUT_AH] = summed.scores / len(pairs)
    finally:
        estimates._RULES[CircuitMethod.RELP] = RELP
    tops = {label: _top(found, graph.edges, top) for label, found in scores.items()}
    union = sorted(set().union(*tops.values()))
    started = time.perf_counter()
    exact = dict(zip(union, phases.exact(union) / len(pairs), strict=True))
    exact_took = time.perf_counter() - started
    print(
        f"\n{name}: {len(pairs)} pair(s), {graph.count:,} edges; the union of the top {top:,} "
        f"is {len(union):,} edges, computed exactly in {exact_took:.1f} s"
    )
    print("| method | Pearson, union | Spearman, union | Pearson, own top | Spearman, own top "
          "| scoring time | against EAP |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, found in scores.items():
        on_union = _agreement(
            np.array([found[edge] for edge in union]), np.array([exact[e] for e in union])
        )
        own = sorted(tops[label])
        on_own = _agreement(
            np.array([found[edge] for edge in own]), np.array([exact[e] for e in own])
        )
        print(
            f"| {label} | {on_union[0]:.3f} | {on_union[1]:.3f} | {on_own[0]:.3f} | "
            f"{on_own[1]:.3f} | {took[label]:.1f} s | {took[label] / took['EAP']:.2f}× |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tasks", default="ioi,needle")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--top", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    arguments = parser.parse_args()
    extractor = attnviz.load(arguments.model)
    made = {"ioi": lambda: _ioi(arguments.pairs), "needle": _needle}
    for name in arguments.tasks.split(","):
        task(extractor, name, made[name](), arguments.top, arguments.steps)


if __name__ == "__main__":
    main()
