"""Position-aware against position-free circuits (PEAP's claim, Haklay et al. 2025): on
the tasks of sample_texts/, each pair's own spans by a schema every task shares —
``changed`` (the tokens where the text and its corrupted twin differ), ``end`` (the last
token, where the answer is read) and ``rest`` — so that pairs of different lengths align
by role. Each task's distinct pairs are split as benchmarks/mib.py splits them; EAP
scores the first half once, split by span; the position-free circuit's scores are the
sums over the spans (as attnviz's spans guarantee). Both are chosen (top) and measured on
those pairs and on the held-out half: CPR (from the signed circuits, as MIB reads it)
and CMD on each graph's own axis (fractions of the edges; of the (edge, span) pairs), and
the faithfulness at equal sizes, MIB's fractions of the edges counted as edges or as
(edge, span) pairs: the least size reaching 0.8 for each, and their ratio (PEAP's claim:
at most 0.5).

    python -m benchmarks.positions [--model smollm2] [--tasks ioi,capital,addition,agreement]
        [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import attnviz
from attnviz.choices import CircuitMethod, Select
from attnviz.circuits.driver import faithfulness_measured
from attnviz.circuits.mib import MIB_FRACTIONS, areas_of, mib_sizes
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.passes import Here
from attnviz.circuits.scored import ScoredGraph
from attnviz.circuits.selections import selected
from attnviz.circuits.spans import pair_spans
from attnviz.inputs import Input
from attnviz.pretrained.answered import answered
from attnviz.request import Request
from benchmarks.mib import _split

SCHEMA = ("changed", "end")
REACHED = 0.8  # the faithfulness PEAP compares sizes at
ONE_PERCENT = 0.01


def _with_schema(extractor, pairs: list[Input], request: Request) -> list[Input]:
    """Each pair with its own spans by the schema, found from the token ids attnviz reads
    (``changed``: the first to the last position the twins differ at)."""
    found = []
    for pair in pairs:
        asked = answered(extractor, pair, request)
        ids = asked.arguments["input_ids"][0].tolist()
        twin = asked.corrupt_arguments["input_ids"][0].tolist()
        differ = [p for p, (a, b) in enumerate(zip(ids, twin, strict=True)) if a != b]
        last = len(ids) - 1
        assert differ and differ[-1] < last, pair.text  # the answer is read after the change
        spans = {"changed": [differ[0], differ[-1] + 1], "end": [last, last + 1]}
        found.append(
            Input(pair.text, answer=pair.answer, versus=pair.versus, corrupt=pair.corrupt,
                  spans=pair_spans(spans))
        )  # fmt: skip
    return found


class Measured:
    """A half's pairs, their phases (split by the schema) and metrics, read once."""

    def __init__(self, extractor, pairs: list[Input], request: Request) -> None:
        self.phases = Here(extractor, request, pairs, None)
        self.count = len(pairs)
        self.scored = self.phases.scored(CircuitMethod.GRADIENT, None, None)
        self.clean = self.scored.clean / self.count
        self.corrupt = self.scored.corrupt / self.count

    def faithfulness(self, circuits: list[ScoredGraph]) -> list[float | None]:
        graph = circuits[0].graph
        masks = [each.measured for each in circuits]
        return faithfulness_measured(
            self.phases, graph, masks, self.clean, self.corrupt, self.count
        )


def _areas(fractions: list[float], top: list, signed: list) -> tuple[float, float]:
    points = [(f, value, Select.TOP) for f, value in zip(fractions, top, strict=True)]
    points += [(f, value, Select.SIGNED) for f, value in zip(fractions, signed, strict=True)]
    found = areas_of(points, Select.TOP)
    assert found is not None  # MIB's ten points
    return found.cpr, found.cmd


def _least(sizes: list[int], values: list) -> int | None:
    return next(
        (s for s, v in zip(sizes, values, strict=True) if v is not None and v >= REACHED), None
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tasks", default="ioi,capital,addition,agreement")
    parser.add_argument("--seed", type=int, default=0, help="pairs split's seed")
    arguments = parser.parse_args()
    extractor = attnviz.load(arguments.model)
    request = Request(maps=False, circuit=CircuitOptions(spans=SCHEMA))
    print(
        "| task | circuit | units | CPR | CMD | at 1% | held out: CPR | CMD | at 1% | "
        f"least size at {REACHED} | held out | time |"
    )
    print("| --- " * 12 + "|")
    for task in arguments.tasks.split(","):
        started = time.perf_counter()
        seen, unseen = (
            _with_schema(extractor, half, request) for half in _split(task, arguments.seed)
        )
        halves = [Measured(extractor, seen, request), Measured(extractor, unseen, request)]
        scored = halves[0].scored
        graph, count = scored.graph, scored.pairs
        spans = scored.spans
        assert spans == (*SCHEMA, "rest") and scored.by_span is not None
        free = ScoredGraph(graph, scored.scores / count)
        aware = ScoredGraph(
            graph, scored.scores / count, by_span=scored.by_span / count, spans=spans
        )
        edges = graph.count
        equal = [size for size, _ in mib_sizes(edges)]  # MIB's sizes, counted in units
        rows = []
        for name, scores, units in (
            ("position-free", free, edges),
            ("by span", aware, edges * len(spans)),
        ):
            own = mib_sizes(units)
            fractions = [fraction for _, fraction in own]
            circuits = [
                selected(scores, rule, size)
                for rule in (Select.TOP, Select.SIGNED)
                for size, _ in own
            ]
            circuits += [selected(scores, Select.TOP, size) for size in equal]
            found = [half.faithfulness(circuits) for half in halves]
            cells = []
            for values in found:
                top, signed, at_equal = values[:10], values[10:20], values[20:]
                cpr, cmd = _areas(fractions, top, signed)
                one = top[MIB_FRACTIONS.index(ONE_PERCENT)]
                cells.append((cpr, cmd, one, _least(equal, at_equal)))
            rows.append((name, units, cells))
        took = time.perf_counter() - started
        for name, units, cells in rows:
            (cpr, cmd, one, least), (h_cpr, h_cmd, h_one, h_least) = cells
            print(
                f"| {task} ({len(seen)}+{len(unseen)} pairs) | {name} | {units:,} | {cpr:.3f} | "
                f"{cmd:.3f} | {one:.3f} | {h_cpr:.3f} | {h_cmd:.3f} | {h_one:.3f} | "
                f"{least or '—'} | {h_least or '—'} | {took:.0f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
