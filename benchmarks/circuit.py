"""Circuits on SmolLM2 (issue 62): what scoring every edge costs against one forward and
backward pass of the same model and pair, and how EAP, EAP-IG and exact scores compare
over the IOI dataset (sample_texts/ioi_pairs.jsonl, from benchmarks/ioi_pairs.py).

Speed, side by side in one process on one loaded model (medians of --runs):
- the floor: a plain forward and backward pass (no hooks, weights frozen) to the metric;
- EAP per pair: both runs recorded, one forward and one backward pass with every
  downstream input's own copy (target <= 3x the floor);
- EAP-IG with N steps (target <= (N + 2)x the floor);
- one faithfulness point, the circuit's pass: two rows, the corrupted run beside the
  circuit's (target <= 2 forwards; the forward beside);
- a whole dataset of --count pairs by EAP, with the faithfulness of 1,000 edges; the
  same with MIB's curve (--curve mib: its CPR and CMD) and with --bootstrap 20.

--compare: EAP and EAP-IG over the dataset, the top --refine edges of EAP-IG scored
exactly (the mean over the pairs): Spearman of each estimate with the exact scores there,
the top edges both share, and the faithfulness of each ranking's circuits at equal sizes.

    python -m benchmarks.circuit [--runs 5] [--count 100] [--steps 5] [--model M --dtype D]
    python -m benchmarks.circuit --compare [--refine 300] [--sizes 100,300,1000,3000,10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import attnviz
from attnviz.circuits.circuit import faithfulness_of
from attnviz.circuits.edges import read_twins
from attnviz.circuits.estimates import estimated_scores
from attnviz.circuits.faithfulness import Twins, circuit_metrics
from attnviz.circuits.mib import areas_of
from attnviz.circuits.scored import ScoredGraph
from attnviz.circuits.selections import selected
from attnviz.inputs import Input
from attnviz.pretrained.answered import answered
from attnviz.request import Request
from benchmarks.ioi_pairs import pairs as ioi_pairs

PAIRS = Path(__file__).resolve().parent.parent / "sample_texts" / "ioi_pairs.jsonl"


def _median(function, runs: int) -> float:
    """The median time of ``runs`` calls after a warm one, each waiting for the GPU where
    the model runs on one (a call returns before the device has done)."""
    function()  # warm
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _twins(extractor, pair: dict):
    from attnviz.circuits.options import CircuitOptions

    request = Request(maps=False, circuit=CircuitOptions())
    asked = answered(extractor, Input(**pair), request)
    return asked, lambda: read_twins(
        extractor.loaded.model,
        asked.body,
        asked.arguments,
        asked.corrupt_arguments,
        asked.metric,
        starts=False,  # as an estimate reads them: no exact pass starts from them
    )


def _as_passed(asked, runs) -> Twins:
    """The pair as a circuit's pass reads it."""
    return Twins(runs.wiring, runs.model, asked.arguments, asked.corrupt_arguments, asked.metric)


def speed(extractor, runs: int, count: int, steps: int) -> None:
    model = extractor.loaded.model
    pair = ioi_pairs(1)[0]
    asked, read = _twins(extractor, pair)
    ids = asked.arguments["input_ids"]
    answer, versus = asked.metric.answer_id, asked.metric.versus_id
    for parameter in model.parameters():
        parameter.requires_grad_(False)

    def floor() -> None:
        embedded = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=embedded, use_cache=False, logits_to_keep=1).logits
        (logits[0, -1, answer].float() - logits[0, -1, versus].float()).backward()

    def forward() -> None:
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

    record = read()
    graph = record.wiring.graph
    estimated = ScoredGraph(graph, estimated_scores(record))
    one = selected(estimated, "top", 1000, prune=False).circuit[None]
    passed = _as_passed(asked, record)
    del record
    timed = {
        "forward": _median(forward, runs),
        "forward + backward (the floor)": _median(floor, runs),
        "EAP: both runs read + the gradient pass": _median(lambda: estimated_scores(read()), runs),
        f"EAP-IG, {steps} steps: both runs + {steps} passes": _median(
            lambda: estimated_scores(read(), steps), runs
        ),
        "a faithfulness point (the circuit's pass)": _median(
            lambda: circuit_metrics(passed, one), runs
        ),
    }
    where = f"{torch.get_num_threads()} threads"
    if model.device.type == "cuda":
        where = torch.cuda.get_device_name(model.device)
    print(f"{extractor.name} ({model.dtype}), one IOI pair of {ids.shape[1]} tokens; "
          f"{graph.count:,} edges; torch {torch.__version__}, {where}")  # fmt: skip
    base = timed["forward + backward (the floor)"]
    for name, seconds in timed.items():
        print(f"  {name:48} {seconds * 1000:8.1f} ms  {seconds / base:5.2f}x the floor")
    point = timed["a faithfulness point (the circuit's pass)"] / timed["forward"]
    print(f"  a faithfulness point: {point:.2f}x one forward")
    dataset = ioi_pairs(count)
    started = time.perf_counter()
    circuit = extractor.circuit(pairs=dataset, edges=1000)
    elapsed = time.perf_counter() - started
    each = elapsed / count * 1000
    print(f"  {count} pairs by EAP, the faithfulness of 1,000 edges: {elapsed:.1f} s "
          f"({each:.0f} ms a pair); faithfulness {circuit.faithfulness:.3f}")  # fmt: skip
    started = time.perf_counter()
    mib = extractor.circuit(pairs=dataset, curve=["mib"])  # its circuit: 1% of the edges
    took = time.perf_counter() - started
    assert mib.areas is not None
    top = [point for point in mib.curve if point.select == "top"]
    alone = areas_of([(p.fraction, p.faithfulness, p.select) for p in top], mib.select)
    assert alone is not None
    print(f"  the same with --curve mib (twenty more circuits in the measuring pass: MIB's ten "
          f"fractions by top and by signed): {took:.1f} s = {took / elapsed:.2f}x; CPR "
          f"{mib.areas.cpr:.3f} (signed; the top circuits' {alone.cpr:.3f}), CMD "
          f"{mib.areas.cmd:.3f}; top: "
          + ", ".join(f"{p.fraction:g}: {p.faithfulness:.3f}" for p in top))  # fmt: skip
    started = time.perf_counter()
    booted = extractor.circuit(pairs=dataset, edges=1000, bootstrap=20)
    took = time.perf_counter() - started
    held = int((booted.scores[booted.graph.edges] != 0).sum())
    print(f"  the same with --bootstrap 20: {took:.1f} s = {took / elapsed:.2f}x; {held:,} of "
          f"{booted.graph.count:,} edges kept their sign; faithfulness of 1,000 edges "
          f"{booted.faithfulness:.3f}")  # fmt: skip


def compare(extractor, refine: int, sizes: list[int], steps: int) -> None:
    from scipy.stats import spearmanr

    dataset = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines()]
    found = {}
    for name, method in (("EAP", "gradient"), (f"EAP-IG ({steps})", "ig")):
        started = time.perf_counter()
        found[name] = extractor.circuit(
            pairs=dataset, method=method, steps=steps if method == "ig" else None, edges=0
        )
        print(f"{name}: {time.perf_counter() - started:.1f} s over {len(dataset)} pairs")
    started = time.perf_counter()
    refined = extractor.circuit(pairs=dataset, method="ig", steps=steps, refine=refine, edges=0)
    print(f"EAP-IG's top {refine} again exactly: {time.perf_counter() - started:.1f} s")
    assert refined.scored.exact is not None
    where = np.nonzero(refined.scored.exact)
    exact = refined.scores[where]
    print(f"{len(dataset)} pairs; clean {refined.clean_metric:.3f}, corrupted "
          f"{refined.corrupt_metric:.3f} (mean logit difference)")  # fmt: skip
    for name, circuit in found.items():
        estimate = circuit.scores[where]
        rho = spearmanr(estimate, exact).statistic
        top = set(np.argsort(-np.abs(estimate))[:50]) & set(np.argsort(-np.abs(exact))[:50])
        print(f"  {name:12} Spearman with exact on the {refine} edges {rho:.3f}; top 50 shared "
              f"{len(top)}")  # fmt: skip
    rankings = {**found, "exact top": refined}
    print("faithfulness at equal sizes (" + ", ".join(str(size) for size in sizes) + " edges):")
    for name, circuit in rankings.items():
        masks = np.stack([selected(circuit.scored, "top", size, False).circuit for size in sizes])
        values = np.zeros(len(sizes))
        clean = corrupt = 0.0
        for pair in dataset:
            asked, read = _twins(extractor, pair)
            runs = read()
            values += np.array(circuit_metrics(_as_passed(asked, runs), masks))
            clean, corrupt = clean + runs.clean.metric, corrupt + runs.corrupt_metric
        count = len(dataset)
        faithful = [
            faithfulness_of(value / count, clean / count, corrupt / count) for value in values
        ]
        print(f"  {name:12} " + "  ".join(f"{value:.3f}" for value in faithful))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--refine", type=int, default=300)
    parser.add_argument("--sizes", default="100,300,1000,3000,10000")
    parser.add_argument("--model", default="smollm2", help="an alias or a model folder")
    parser.add_argument("--dtype", default="auto", help="the weights' dtype")
    arguments = parser.parse_args()
    extractor = attnviz.load(
        arguments.model, load_options=attnviz.LoadOptions(dtype=arguments.dtype)
    )
    if arguments.compare:
        sizes = [int(size) for size in arguments.sizes.split(",")]
        compare(extractor, arguments.refine, sizes, arguments.steps)
    else:
        speed(extractor, arguments.runs, arguments.count, arguments.steps)


if __name__ == "__main__":
    main()
