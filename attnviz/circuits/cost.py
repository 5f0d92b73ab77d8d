"""What a circuit's passes over its pairs will cost, said once before a long rest of one:
how long, and what costs less (after the first pair's first part, which is timed)."""

from __future__ import annotations

from dataclasses import dataclass

from attnviz.choices import CircuitMethod
from attnviz.circuits.options import DEFAULT_STEPS
from attnviz.errors import option, warn
from attnviz.progress import LONG_REST


@dataclass(frozen=True)
class Cost:
    """A pass of a circuit over its pairs that will take long, said once, after the first
    pair's first part, before the rest: ``what`` the pass does, ``repeats`` times the first
    pair's work in all (each pair, each part of its positions), and what costs less."""

    what: str
    repeats: int
    cheaper: tuple[str, ...] = ()  # each a clause: one cheaper option and what it costs

    def __call__(self, seconds: float, done: int, total: int) -> None:
        left = seconds * (total * self.repeats - done) / done
        if left >= LONG_REST:
            cheaper = "".join(f"; {clause}" for clause in self.cheaper)
            warn(f"{self.what} takes about {left:,.0f} s more at the first pair's pace{cheaper}")


def unsaid(_seconds: float, _done: int, _total: int) -> None:
    """The pairs after the first: their cost was said with it."""


# The estimates of one forward and one backward pass a pair, by the name the cost says
_ESTIMATES = {CircuitMethod.GRADIENT: "EAP", CircuitMethod.RELP: "RelP"}


def scoring_cost(method: CircuitMethod, steps: int | None, repeats: int) -> Cost:
    """What is said of scoring every edge that will take long, and what costs less."""
    gradient = f"{option('--method', 'gradient')} (EAP) reads one point a pair"
    if method is CircuitMethod.EXACT:
        return Cost(
            "scoring every edge exactly",
            repeats,
            (
                f"{option('--method', 'gradient')} (EAP) estimates every edge from one forward "
                "and one backward pass a pair",
                f"{option('--refine', 'K')} then computes its top K edges exactly",
            ),
        )
    if method is CircuitMethod.IG:
        assert steps is not None  # EAP-IG's
        less = f"{option('--steps', DEFAULT_STEPS)} (the default) costs"
        fewer = (f"{less} {steps / DEFAULT_STEPS:.3g}× less",) if steps > DEFAULT_STEPS else ()
        return Cost(
            f"EAP-IG at {steps:,} point{'s' if steps != 1 else ''} a pair",
            repeats,
            (gradient, *fewer),
        )
    return Cost(f"scoring every edge by {_ESTIMATES.get(method, 'EAP')}", repeats)
