"""What a circuit's passes over its pairs will cost, said once before a long rest of one:
how long, and what costs less (after the first pair's first part, which is timed)."""

from __future__ import annotations

from dataclasses import dataclass

from attnviz.choices import CircuitMethod
from attnviz.circuit_options import DEFAULT_STEPS
from attnviz.errors import warn
from attnviz.progress import LONG_REST


@dataclass(frozen=True)
class Cost:
    """A pass of a circuit over its pairs that will take long, said once, after the first
    pair's first part, before the rest: ``what`` the pass does, ``repeats`` times the first
    pair's work in all (each pair, each part of its positions), and what costs less."""

    what: str
    repeats: int
    cheaper: str = ""

    def __call__(self, seconds: float, done: int, total: int) -> None:
        left = seconds * (total * self.repeats - done) / done
        if left >= LONG_REST:
            cheaper = f"; {self.cheaper}" if self.cheaper else ""
            warn(f"{self.what} takes about {left:,.0f} s more{cheaper}")


def unsaid(_seconds: float, _done: int, _total: int) -> None:
    """The pairs after the first: their cost was said with it."""


def scoring_cost(method: CircuitMethod, steps: int | None, repeats: int) -> Cost:
    """What is said of scoring every edge that will take long, and what costs less."""
    if method is CircuitMethod.EXACT:
        return Cost(
            "scoring every edge exactly",
            repeats,
            "--method gradient (EAP) estimates every edge from one forward and one backward "
            "pass a pair, and --refine K computes its top K edges exactly",
        )
    if method is CircuitMethod.IG:
        return Cost(
            f"EAP-IG at {steps:,} points a pair",
            repeats,
            f"--method gradient (EAP) reads one point a pair, --steps {DEFAULT_STEPS} (the "
            f"default) {DEFAULT_STEPS}",
        )
    return Cost("scoring every edge by EAP", repeats)
