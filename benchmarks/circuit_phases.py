"""A circuit's memory phase by phase (issue 62): both runs read to score every edge and
the gradient pass (EAP), a part of the positions at a time where the record is large (as
a circuit reads them), then the faithfulness pass of the circuit of the top 100 edges
(two rows: the corrupted run beside the circuit's); each phase's peak above what the
process held when it began (benchmarks/effects.py's PeakMemory) and above the loaded
model, after a warm forward, in one process.

The twins are benchmarks/effects.py's (a filler text ending in a fact, the fact's
subject changed); with --early they differ in their second token too, so that every
position is recorded.

    python -m benchmarks.circuit_phases [--model gemma3] [--tokens 8192] [--early]
"""

from __future__ import annotations

import argparse
import functools
import time

import torch

import attnviz
from attnviz.circuits.ablated import changed_from
from attnviz.circuits.differences import parts
from attnviz.circuits.edges import graph_of, read_twins
from attnviz.circuits.estimates import estimated_scores
from attnviz.circuits.faithfulness import Twins, circuit_metrics
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.scored import ScoredGraph
from attnviz.circuits.selections import selected
from attnviz.inputs import Input
from attnviz.pretrained.answered import answered
from attnviz.request import Request
from benchmarks.effects import FACT_ANSWER, FACT_VERSUS, PeakMemory, twins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3", help="an alias or a model folder")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--early", action="store_true", help="the twins differ from token 1")
    options = parser.parse_args()
    extractor = attnviz.load(options.model)
    model = extractor.loaded.model
    clean, corrupt = twins(extractor.loaded.tokenizer, options.tokens)
    given = Input(clean, answer=FACT_ANSWER, versus=FACT_VERSUS, corrupt=corrupt)
    asked = answered(extractor, given, Request(maps=False, circuit=CircuitOptions()))
    corrupt_arguments = dict(asked.corrupt_arguments)
    if options.early:
        ids = corrupt_arguments["input_ids"].clone()
        ids[0, 1] = ids[0, 2]
        corrupt_arguments["input_ids"] = ids
    device = model.device

    def read(part):  # as a circuit reads them: no exact pass starts from them
        arguments, metric = asked.arguments, asked.metric
        return read_twins(model, asked.body, arguments, corrupt_arguments, metric, False, part)

    with PeakMemory(device) as loaded:  # what the loaded model holds: the peaks' base
        pass

    def phase(name: str, work):
        started = time.perf_counter()
        with PeakMemory(device) as memory:
            found = work()
        seconds = time.perf_counter() - started
        peak = (memory.peak - loaded.start) / 2**30
        print(f"  {name:40} +{memory.above:.2f} GiB (peak: the model + {peak:.2f} GiB)  "
              f"{seconds:6.1f} s", flush=True)  # fmt: skip
        return found

    with torch.inference_mode():
        model(**asked.arguments, use_cache=False, logits_to_keep=1)  # warm
    forward = lambda: model(**asked.arguments, use_cache=False, logits_to_keep=1)  # noqa: E731
    print(f"{extractor.name}, {asked.arguments['input_ids'].shape[1]} tokens, on {device}:")
    with torch.inference_mode():
        phase("a forward", forward)
    ids = asked.arguments["input_ids"]
    start = changed_from(asked.arguments, corrupt_arguments, None)
    embedding = model.get_input_embeddings().weight
    body = asked.body
    positions = slice(start, ids.shape[1])
    width, heads_width = embedding.shape[1], body.heads * body.head_size
    spans = parts(graph_of(body), positions, width, heads_width, embedding.element_size())
    print(f"  (the twins differ from position {start} on: {len(spans)} part(s))")
    scores = 0
    for part in spans:
        name = f"both runs read to score, {part.start}-{part.stop - 1}"
        runs = phase(name, functools.partial(read, part))
        scores += phase(
            "the gradient pass, that record held", functools.partial(estimated_scores, runs)
        )
        wiring = runs.wiring
        del runs
    passed = Twins(wiring, model, asked.arguments, corrupt_arguments, asked.metric)
    kept = selected(ScoredGraph(wiring.graph, scores), "top", 100, prune=False).circuit[None]
    phase("the circuit's pass (two rows)", lambda: circuit_metrics(passed, kept))


if __name__ == "__main__":
    main()
