"""MIB's circuit measures (Mueller et al. 2025) for attnviz's methods, on real models and
the tasks of sample_texts/: each task's distinct pairs split in two as ``attnviz pairs
split --held-out 0.5 --seed SEED`` splits them; each method scores one half; its
circuits at MIB's ten fractions of the edges are measured on those pairs (CPR, CMD, the
faithfulness at 1% of the edges) and on the other half, which no method saw (held out,
as MIB keeps a test split). CPR is read from the signed circuits' curve (the largest
scores in MIB's sign; for optimize, whose scores are all of one sign, its own), CMD and
the faithfulness at 1% from the selection's, as MIB's print_results.py reads them; the
CPR of the selection's own curve is printed beside it.

Methods: EAP (gradient), EAP-IG (ig, --steps points), EAP-IG with its top 1% of edges
computed exactly (ig --refine), optimize (a mask trained from EAP-IG's scores) and each
(optimize --train-each: a circuit trained at each of MIB's fractions, not run by
default: nine trainings). Selections: top (the edges of largest |score|) and greedy
(EAP-IG's, from the logits up), each from the same scores. The time is the whole circuit
command's: scoring (and training) and the ten circuits measured; a later selection's
(+) is its command's that reads the scores from the first one's JSON (``--scores``) and
measures its own ten circuits.

    python -m benchmarks.mib [--models smollm2,gemma3] [--tasks ioi,capital,addition,agreement]
        [--methods gradient,ig,refined,optimize] [--selects top,greedy] [--steps 5]
        [--train-steps 300] [--points] [--seed 0]

``--points`` prints a second table after it: each row's faithfulness at the ten fractions,
on the pairs scored.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import attnviz
from attnviz.choices import CircuitMethod, Select
from attnviz.circuits.circuit import CurvePoint
from attnviz.circuits.driver import faithfulness_measured
from attnviz.circuits.mib import MIB_FRACTIONS, areas_of, mib_sizes
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.pair_checks import split_pairs
from attnviz.circuits.passes import Here, graph_of_model
from attnviz.circuits.scored import ScoredGraph
from attnviz.circuits.selections import selected
from attnviz.inputs import Input
from attnviz.request import Request

SAMPLES = Path(__file__).resolve().parent.parent / "sample_texts"
ONE_PERCENT = 0.01
HELD_OUT = 0.5  # the share of each task's pairs no method sees


def _pairs(task: str) -> list[dict]:
    lines = (SAMPLES / f"{task}_pairs.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _split(task: str, seed: int) -> tuple[list[Input], list[Input]]:
    """A task's pairs split as ``attnviz pairs split --held-out 0.5 --seed SEED`` splits
    them: the pairs scored on, and the distinct others held out."""
    fitted, held, _ = split_pairs(_pairs(task), HELD_OUT, seed)
    return [Input(**pair) for pair in fitted], [Input(**pair) for pair in held]


def _asked(method: str, count: int, steps: int, train_steps: int) -> dict:
    """The circuit call's arguments of a method, its circuit 1% of the graph's edges (as
    --curve mib makes it)."""
    size = int(ONE_PERCENT * count)
    common = {"curve": ["mib"], "progress": False}
    if method == "refined":
        return common | {"method": "ig", "steps": steps, "refine": size}
    if method in ("optimize", "each"):
        trained = {"method": "optimize", "steps": steps, "train_steps": train_steps}
        return common | trained | {"train_each": method == "each"}
    if method == "ig":
        return common | {"method": "ig", "steps": steps}
    return common | {"method": method}


class HeldOut:
    """The pairs no method saw, read once: their phases and clean and corrupted metrics
    (one EAP pass each), for measuring every method's circuits on them."""

    def __init__(self, extractor, pairs: list[Input]) -> None:
        request = Request(maps=False, circuit=CircuitOptions())
        self.phases = Here(extractor, request, pairs, None)
        scored = self.phases.scored(CircuitMethod.GRADIENT, None, None)
        self.count = len(pairs)
        self.clean, self.corrupt = scored.clean / self.count, scored.corrupt / self.count

    def curve(self, circuit) -> list[CurvePoint]:
        """The faithfulness over the held-out pairs of the circuits at MIB's fractions
        that each selection of ``circuit``'s curve (its own, and signed) chooses from its
        scores."""
        sizes = mib_sizes(circuit.graph.count)
        given = ScoredGraph(circuit.graph, circuit.scores)
        rules = list(dict.fromkeys(point.select for point in circuit.curve))
        points = [(size, fraction, rule) for rule in rules for size, fraction in sizes]
        masks = [selected(given, rule, size, True).circuit for size, _, rule in points]
        found = faithfulness_measured(
            self.phases, circuit.graph, masks, self.clean, self.corrupt, self.count
        )
        return [
            CurvePoint(size, int(mask.sum()), value, fraction, rule)
            for (size, fraction, rule), mask, value in zip(points, masks, found, strict=True)
        ]


def _own(curve, select: Select) -> list[CurvePoint]:
    """The points of ``curve`` chosen by ``select`` (not the signed ones CPR reads)."""
    return [point for point in curve if point.select is select]


def _at_one_percent(curve, select: Select) -> float | None:
    (point,) = [point for point in _own(curve, select) if point.fraction == ONE_PERCENT]
    return point.faithfulness


def _said(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _selected_again(extractor, circuit, seen: list[Input], select: Select):
    """The circuit command over ``seen`` that reads ``circuit``'s scores from its JSON
    document (``--scores``) and chooses by ``select``, and its time."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "circuit.json"
        path.write_text(json.dumps(circuit.document()), encoding="utf-8")
        started = time.perf_counter()
        again = extractor.circuit(
            pairs=seen, scores=str(path), select=select, curve=["mib"], progress=False
        )
        return again, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--tasks", default="ioi,capital,addition,agreement")
    parser.add_argument("--methods", default="gradient,ig,refined,optimize")
    parser.add_argument("--selects", default="top,greedy")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--points", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="pairs split's seed")
    arguments = parser.parse_args()
    curves: list[str] = []  # each row's points, for --points
    print(
        "| model | task | method | selection | CPR | CPR of the selection's | CMD | faithfulness "
        "at 1% | held out: CPR | CMD | at 1% | time |"
    )
    print("| --- " * 12 + "|")
    selects = [Select(select) for select in arguments.selects.split(",")]
    for model in arguments.models.split(","):
        extractor = attnviz.load(model)
        count = graph_of_model(extractor).count
        first = [Input(**_pairs(arguments.tasks.split(",")[0])[0])]
        # warm: the first scoring and measuring passes' one-time costs (unwarmed, SmolLM2's
        # first row, EAP on IOI, took 131 s where EAP-IG on the same pairs then took 44 s)
        extractor.circuit(pairs=first, curve=["mib"], progress=False)
        for task in arguments.tasks.split(","):
            seen, unseen = _split(task, arguments.seed)
            held_out = HeldOut(extractor, unseen)
            for method in arguments.methods.split(","):
                asked = _asked(method, count, arguments.steps, arguments.train_steps)
                started = time.perf_counter()
                scored = extractor.circuit(pairs=seen, select=selects[0], **asked)
                took = f"{time.perf_counter() - started:.0f} s"
                for select in selects:
                    circuit = scored
                    if select is not selects[0]:
                        circuit, again = _selected_again(extractor, scored, seen, select)
                        took = f"+{again:.0f} s"
                    areas = circuit.areas
                    assert areas is not None  # a MIB curve
                    other = held_out.curve(circuit)
                    points = [(point.fraction, point.faithfulness, point.select) for point in other]
                    other_areas = areas_of(points, select)
                    assert other_areas is not None
                    seen_one, unseen_one = (
                        _said(_at_one_percent(curve, select)) for curve in (circuit.curve, other)
                    )
                    own = _own(circuit.curve, select)
                    alone = areas_of([(p.fraction, p.faithfulness, p.select) for p in own], select)
                    assert alone is not None
                    print(
                        f"| {model} | {task} ({len(seen)}+{len(unseen)} pairs) | {method} | "
                        f"{select} | {areas.cpr:.3f} | {alone.cpr:.3f} | {areas.cmd:.3f} | "
                        f"{seen_one} | "
                        f"{other_areas.cpr:.3f} | {other_areas.cmd:.3f} | {unseen_one} | {took} |",
                        flush=True,
                    )
                    faithful = " | ".join(_said(point.faithfulness) for point in own)
                    curves.append(f"| {model} | {task} | {method} | {select} | {faithful} |")
    if arguments.points:
        fractions = " | ".join(f"{fraction * 100:g}%" for fraction in MIB_FRACTIONS)
        print(f"\n| model | task | method | selection | {fractions} |")
        print("| --- " * (4 + len(MIB_FRACTIONS)) + "|")
        print("\n".join(curves))


if __name__ == "__main__":
    main()
