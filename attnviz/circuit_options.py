"""What ``circuit`` asks, checked once: how each edge is scored and which circuits are
measured (the request's ``circuit`` field; the CLI's options are these)."""

from __future__ import annotations

from dataclasses import dataclass

from attnviz.choices import CircuitMethod, chosen
from attnviz.errors import UsageError

ALL = "all"
DEFAULT_EDGES = 100  # the circuit kept where --edges is not given (or every edge, if fewer)
DEFAULT_STEPS = 5  # EAP-IG's points between the corrupted and the clean input embeddings
# The most points asked: EAP-IG's own runs take 5 to 100; past a thousand the estimate
# changes little and each point is a forward and a backward pass of every pair.
MOST_STEPS = 1000


@dataclass(frozen=True)
class CircuitOptions:
    """Edges scored by ``method`` (``steps`` points for ``ig``; ``refine`` K: the top K
    of an estimate computed exactly); the circuit of the ``edges`` largest |scores| (an
    int, ``"all"``, or None: 100, or every edge where there are fewer) measured for its
    faithfulness, and each size of ``curve`` too (ints or ``"all"``, each measured once)."""

    method: CircuitMethod = CircuitMethod.GRADIENT
    steps: int | None = None
    edges: int | str | None = None
    curve: tuple[int | str, ...] = ()
    refine: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", chosen(CircuitMethod, self.method, "method"))
        if self.steps is not None and self.method is not CircuitMethod.IG:
            raise UsageError("--steps counts EAP-IG's points: give it with --method ig")
        if self.method is CircuitMethod.IG:
            object.__setattr__(self, "steps", DEFAULT_STEPS if self.steps is None else self.steps)
            _count(self.steps, "--steps", least=1, most=MOST_STEPS)
        if self.refine is not None:
            if self.method is CircuitMethod.EXACT:
                raise UsageError(
                    "--refine computes an estimate's top edges exactly: give --method gradient "
                    "or ig (--method exact scores every edge exactly)"
                )
            _count(self.refine, "--refine", least=1)
        if self.edges is not None and self.edges != ALL:
            _count(self.edges, "--edges", least=0)
        curve = tuple(self.curve)
        for size in curve:
            if size != ALL:
                _count(size, "--curve", least=0)
        # a size given twice is one circuit: sorted, "all" last
        once = sorted(set(curve), key=lambda size: (size == ALL, 0 if size == ALL else size))
        object.__setattr__(self, "curve", tuple(once))

    def kept(self, count: int) -> int:
        """How many edges the circuit keeps, in a graph of ``count`` edges."""
        if self.edges is None:
            return min(DEFAULT_EDGES, count)
        return count if self.edges == ALL else _fitting(int(self.edges), count, "--edges")

    def sizes(self, count: int) -> list[int]:
        """The curve's sizes in a graph of ``count`` edges, each checked, each once."""
        sizes = (
            count if size == ALL else _fitting(int(size), count, "--curve") for size in self.curve
        )
        return list(dict.fromkeys(sizes))

    def refined(self, count: int) -> int | None:
        """How many of the estimate's top edges are computed again exactly, checked against
        the graph's ``count`` edges."""
        if self.refine is None:
            return None
        return _fitting(self.refine, count, "--refine", whole="--method exact")


def _fitting(size: int, count: int, option: str, whole: str = ALL) -> int:
    """``size`` edges of a graph of ``count``; more is refused, naming ``whole``, what asks
    for every edge."""
    if size > count:
        raise UsageError(
            f"{option} {size} is more edges than the model's graph has ({count:,}): give "
            f"at most {count:,}, or {whole}"
        )
    return size


def _count(value: object, option: str, least: int, most: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UsageError(f"{option} is a whole number of at least {least}, not {value!r}")
    if most is not None and value > most:
        raise UsageError(f"{option} is at most {most:,}, not {value:,}")
