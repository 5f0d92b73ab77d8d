"""What ``circuit`` asks, checked once: how each edge is scored and which circuits are
measured (the request's ``circuit`` field; the CLI's options are these)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from attnviz.choices import (
    INTERVENTIONS,
    Ablation,
    CircuitMethod,
    Count,
    Level,
    Select,
    chosen,
)
from attnviz.circuits.mib import MIB, MIB_CIRCUIT, MIB_FRACTIONS, mib_sizes
from attnviz.circuits.spans import checked_spans
from attnviz.circuits.training import Training
from attnviz.errors import UsageError, refuse

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Circuit
    from attnviz.circuits.eap_ig import EapIgGraph

ALL = "all"
DEFAULT_EDGES = 100  # the circuit kept where --edges is not given (or every edge, if fewer)
DEFAULT_NODES = 20  # a node circuit's, where --nodes is not given (or every node, if fewer)
DEFAULT_STEPS = 5  # EAP-IG's points between the corrupted and the clean input embeddings
# The most points asked: EAP-IG's own runs take 5 to 100; past a thousand the estimate
# changes little and each point is a forward and a backward pass of every pair.
MOST_STEPS = 1000
# The most resamples --bootstrap asks: each is a (U, N) sum kept beside the scores
# (SmolLM2: 1.2 MB).
MOST_RESAMPLES = 200
# --method optimize's training (:mod:`attnviz.circuits.optimized`): defaults that gave
# SmolLM2's and Gemma 3's IOI circuits their faithfulness (docs/effects.md), and bounds
# past which Adam on a mask's logits only jumps or only stands
DEFAULT_TRAIN_STEPS = 300
DEFAULT_LEARNING_RATE = 0.1
DEFAULT_SPARSITY = 1.0
MOST_TRAIN_STEPS = 100_000
MOST_LEARNING_RATE = 10.0
MOST_SPARSITY = 1000.0


_FROM_IG = (CircuitMethod.IG, CircuitMethod.OPTIMIZE)  # scored by EAP-IG (optimize: to start)


@dataclass(frozen=True)
class CircuitOptions:
    """Edges scored by ``method`` ("exact"; "gradient": EAP; "ig": EAP-IG with ``steps``
    points; "relp": RelP, EAP's passes by relevance propagation's rules; ``refine`` K:
    the top K of an estimate computed exactly; "optimize": a mask learned from EAP-IG's
    scores, with ``train_each`` and a ``curve`` one trained at each
    size, each inside the next), each edge alone carrying ``ablation``'s value; the circuit
    chosen by ``select`` (top, greedy, signed or ilp: ``edges`` of them, an int, ``"all"``, or
    None: 100, or every edge where there are fewer; threshold: every edge of |score| at least
    ``threshold``), its dead ends out if ``prune``, measured for its faithfulness, and each
    size of ``curve`` too (ints or ``"all"``, each measured once; or ``"mib"`` alone: MIB's
    ten fractions of the graph, the circuit itself its 1%, so not with ``edges`` or
    ``nodes``); ``level`` "node": ``nodes`` heads and MLPs chosen by their own scores, the
    edges between them kept; ``scores``: a circuit's JSON document over the same pairs,
    whose scores are taken; ``bootstrap`` B: the scores bootstrapped over B resamples of
    the pairs (:mod:`attnviz.circuits.bootstrap`); ``count`` "ungrouped": the sizes, the
    fractions and what a circuit keeps counted as MIB's graph counts edges (a key/value
    head's inputs once per query head, :meth:`attnviz.circuits.graph.Graph.copies`)."""

    method: CircuitMethod = CircuitMethod.GRADIENT
    steps: int | None = None
    edges: int | str | None = None
    curve: tuple[int | str, ...] = ()
    refine: int | None = None
    select: Select = Select.TOP
    threshold: float | None = None
    prune: bool = True
    # a circuit's JSON document (circuit -f json) whose scores are taken, not scored again
    scores: str | None = None
    level: Level = Level.EDGE
    nodes: int | str | None = None  # a node circuit's size (level node), as edges is
    # B: every edge's score bootstrapped over B resamples of the pairs (its sign held)
    bootstrap: int | None = None
    # --method optimize's: Adam's steps (a pair each), its learning rate, the weight of
    # the mask's mean in the loss
    train_steps: int | None = None
    learning_rate: float | None = None
    sparsity: float | None = None
    # optimize with a curve: a circuit trained at each size, each inside the next
    train_each: bool = False
    # what an edge outside the circuit carries, in scoring and in faithfulness
    ablation: Ablation = Ablation.PATCH
    # how edges are counted in sizes, fractions and what a circuit keeps (ungrouped: MIB's)
    count: Count = Count.GROUPED
    # where each edge's score runs: the spans of each pair's positions (attnviz.circuits.spans)
    spans: tuple[str, ...] = ()
    by_position: bool = False  # every position its own span
    # the file of ``scores``, read once as the options are made (a pipe can be read once)
    given: Circuit | EapIgGraph | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", chosen(CircuitMethod, self.method, "method"))
        object.__setattr__(
            self, "ablation", chosen(Ablation, self.ablation, "ablation", INTERVENTIONS)
        )
        self._check_ablation()
        object.__setattr__(self, "select", chosen(Select, self.select, "selection"))
        object.__setattr__(self, "level", chosen(Level, self.level, "level"))
        object.__setattr__(self, "count", chosen(Count, self.count, "count"))
        self._check_level()
        self._check_selection()
        if self.steps is not None and self.method not in _FROM_IG:
            raise UsageError(
                "--steps counts EAP-IG's points: give it with --method ig (or optimize)"
            )
        self._check_training()
        if self.scored_by is CircuitMethod.IG:
            object.__setattr__(self, "steps", DEFAULT_STEPS if self.steps is None else self.steps)
            _count(self.steps, "--steps", least=1, most=MOST_STEPS)
        if self.refine is not None:
            if self.method is CircuitMethod.EXACT:
                raise UsageError(
                    "--refine computes an estimate's top edges exactly: give --method gradient, "
                    "ig or relp (--method exact scores every edge exactly)"
                )
            _count(self.refine, "--refine", least=1)
        if self.edges is not None and self.edges != ALL:
            _count(self.edges, "--edges", least=0)
        if self.bootstrap is not None:
            self._check_bootstrap()
        self._check_curve(tuple(self.curve))
        self._check_spans()
        self._read_scores()

    def _check_curve(self, curve: tuple[int | str, ...]) -> None:
        if MIB in curve:
            self._check_mib(curve)
            return
        for size in curve:
            if size != ALL:
                _count(size, "--curve", least=0)
        # a size given twice is one circuit: sorted, "all" last
        once = sorted(set(curve), key=lambda size: (size == ALL, 0 if size == ALL else size))
        object.__setattr__(self, "curve", tuple(once))

    def _read_scores(self) -> None:
        """The file of ``scores`` read, once, after every other option is checked (a
        usage error reads no file)."""
        if self.scores is None or self.given is not None:
            return
        from attnviz.circuits.eap_ig import read_scores  # numpy: only where a file is given

        object.__setattr__(self, "given", read_scores(self.scores))

    @property
    def positioned(self) -> bool:
        """Whether each edge's score is split by span (``spans`` or ``by_position``)."""
        return bool(self.spans) or self.by_position

    def _check_spans(self) -> None:
        object.__setattr__(self, "spans", checked_spans(tuple(self.spans), self.by_position))
        if not self.positioned:
            return
        option = "--by-position" if self.by_position else "--spans"
        refuse(
            *(
                (given, f"{option} splits each edge's score by span as it is scored: not yet "
                 f"with {other}")
                for given, other in (
                    (self.scores is not None and self.by_position, "--scores"),
                    (self.method is CircuitMethod.OPTIMIZE, "--method optimize"),
                    (self.select is Select.GREEDY, "--select greedy"),
                    (self.select is Select.ILP, "--select ilp"),
                    (self.level is Level.NODE, "--level node"),
                )
            )
        )  # fmt: skip

    @property
    def scored_by(self) -> CircuitMethod:
        """How the edges are scored first: by the method; optimize from EAP-IG's scores,
        or, with --ablation mean or zero, from EAP's unless --steps asks for EAP-IG's (over
        each group of nodes' outputs in turn: (1 + 2 × layers) × steps passes a pair)."""
        if self.method is not CircuitMethod.OPTIMIZE:
            return self.method
        if INTERVENTIONS[self.ablation].from_inputs or self.steps is not None:
            return CircuitMethod.IG
        return CircuitMethod.GRADIENT

    def _check_ablation(self) -> None:
        if self.scores is not None and not INTERVENTIONS[self.ablation].corrupt:
            raise UsageError(
                f"--scores takes a patched circuit's scores and metrics: not with --ablation "
                f"{self.ablation}"
            )

    def _check_training(self) -> None:
        given = {
            "--train-steps": self.train_steps,
            "--learning-rate": self.learning_rate,
            "--sparsity": self.sparsity,
        }
        if self.train_each:
            given["--train-each"] = True
        if self.method is not CircuitMethod.OPTIMIZE:
            for option, value in given.items():
                if value is not None:
                    raise UsageError(f"{option} is --method optimize's: give both, or neither")
            return
        if self.train_each and not self.curve:
            raise UsageError(
                "--train-each trains a circuit at each size of the curve: give --curve"
            )
        for option, refused in (
            ("--refine", self.refine is not None),
            ("--bootstrap", self.bootstrap is not None),
            ("--level node", self.level is Level.NODE),
            ("--count ungrouped", self.count is Count.UNGROUPED),
        ):
            if refused:
                raise UsageError(
                    f"--method optimize learns a mask over the edges: not with {option}"
                )
        steps = DEFAULT_TRAIN_STEPS if self.train_steps is None else self.train_steps
        _count(steps, "--train-steps", least=1, most=MOST_TRAIN_STEPS)
        rate = DEFAULT_LEARNING_RATE if self.learning_rate is None else self.learning_rate
        _number(rate, "--learning-rate", MOST_LEARNING_RATE, least_open=True)
        object.__setattr__(self, "train_steps", steps)
        object.__setattr__(self, "learning_rate", float(rate))
        if self.train_each:
            if self.sparsity is not None:
                raise UsageError(
                    "--sparsity sizes one trained mask; --train-each holds each circuit at "
                    "its size of the curve: not both"
                )
            return
        sparsity = DEFAULT_SPARSITY if self.sparsity is None else self.sparsity
        _number(sparsity, "--sparsity", MOST_SPARSITY, least_open=False)
        object.__setattr__(self, "sparsity", float(sparsity))

    @property
    def training(self) -> Training:
        """--method optimize's training, as asked (its sizes, with --train-each, still
        to come)."""
        assert self.train_steps is not None and self.learning_rate is not None
        return Training(self.train_steps, self.learning_rate, self.sparsity)

    def _check_level(self) -> None:
        if self.level is Level.EDGE:
            if self.nodes is not None:
                raise UsageError(
                    "--nodes counts a node circuit's heads and MLPs: give --level node"
                )
            return
        refuse(
            (self.edges is not None, "--level node chooses nodes: give --nodes N, not --edges"),
            (
                self.refine is not None,
                "--refine computes edges exactly: a node circuit is chosen by its nodes' "
                "scores (--method exact patches each node)",
            ),
            (
                self.select is Select.GREEDY,
                "--select greedy takes edges from the logits up: --level edge",
            ),
            (
                self.count is Count.UNGROUPED,
                "--count ungrouped counts edges as MIB's graph has them; a node circuit's "
                "heads and MLPs are MIB's nodes either way: --level edge",
            ),
            (self.select is Select.ILP, "--select ilp chooses edges: --level edge"),
        )
        if self.nodes is not None and self.nodes != ALL:
            _count(self.nodes, "--nodes", least=0)

    def _check_bootstrap(self) -> None:
        _count(self.bootstrap, "--bootstrap", least=2, most=MOST_RESAMPLES)
        refuse(
            (
                self.scores is not None,
                "--bootstrap resamples each pair's scores as they are made: score again, "
                "not with --scores",
            ),
            (
                self.refine is not None,
                "--refine computes the top edges exactly over the pairs as given: not with "
                "--bootstrap",
            ),
        )

    def _check_selection(self) -> None:
        if self.select in (Select.GREEDY, Select.ILP) and self.count is Count.UNGROUPED:
            raise UsageError(
                f"--select {self.select} grows the circuit through a key/value head's inputs, "
                "shared by its query heads, where MIB's graph reaches each copy through its "
                "own head only: --select top or signed with --count ungrouped"
            )
        if self.select is Select.SIGNED and self.method is CircuitMethod.OPTIMIZE:
            raise UsageError(
                "--select signed takes the largest scores in MIB's sign; --method optimize's "
                "rank its learned mask, the kept first, all of one sign: give --select top"
            )
        if self.select is not Select.THRESHOLD:
            if self.threshold is not None:
                raise UsageError("--threshold is --select threshold's: give both, or neither")
            return
        if self.threshold is None:
            raise UsageError(
                "--select threshold keeps every edge of |score| at least T: give --threshold T"
            )
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float):
            raise UsageError(f"--threshold is a number, not {self.threshold!r}")
        if not 0 <= self.threshold < float("inf"):
            raise UsageError(f"--threshold is a |score|, 0 or more, not {self.threshold!r}")
        for option, given in (("--edges", self.edges is not None), ("--curve", bool(self.curve))):
            if given:
                raise UsageError(
                    f"{option} counts the edges of --select top, greedy, signed or ilp: --select "
                    "threshold keeps every edge of |score| at least --threshold"
                )

    def _check_mib(self, curve: tuple[int | str, ...]) -> None:
        if len(curve) > 1:
            raise UsageError(f"--curve {MIB} is MIB's ten fractions of the graph: give it alone")
        given, _, option = self._size()
        if given is not None:
            raise UsageError(
                f"--curve {MIB} sizes the circuit itself, MIB's 1% of the graph: leave out "
                f"{option} (or give the sizes as --curve N,M)"
            )

    def asked(self, count: int) -> float:
        """What the circuit is chosen by, in a graph of ``count`` edges (or nodes, at the
        node level): how many it keeps (top, greedy, signed, ilp), MIB's 1% of them with ``--curve
        mib``, or the least |score| (threshold)."""
        if self.threshold is not None:
            return float(self.threshold)
        if self.curve == (MIB,):
            return mib_sizes(count)[MIB_FRACTIONS.index(MIB_CIRCUIT)][0]
        given, default, option = self._size()
        if given is None:
            return min(default, count)
        return count if given == ALL else _fitting(int(given), count, option, unit=self._unit)

    @property
    def _unit(self) -> str:
        return "nodes" if self.level is Level.NODE else "edges"

    def _size(self) -> tuple[int | str | None, int, str]:
        """The size given (edges, or nodes), its default and its option."""
        if self.level is Level.NODE:
            return self.nodes, DEFAULT_NODES, "--nodes"
        return self.edges, DEFAULT_EDGES, "--edges"

    def sizes(self, count: int) -> list[tuple[int, float]]:
        """The curve's sizes in a graph of ``count`` edges (or nodes), each checked, once,
        with the fraction of them each is; MIB's ten, each (a small graph's fractions can
        round down to one size)."""
        if self.curve == (MIB,):
            return mib_sizes(count)
        sizes = [
            count if size == ALL else _fitting(int(size), count, "--curve", unit=self._unit)
            for size in self.curve
        ]
        return [(size, size / count) for size in dict.fromkeys(sizes)]

    @property
    def curve_selections(self) -> tuple[Select, ...]:
        """The selections the curve's circuits are chosen by: the circuit's own; on MIB's
        curve ``signed`` too, whose circuits MIB reads its CPR from (not where the
        circuit's is ``signed`` already, nor for optimize, whose scores rank its learned
        mask, all of one sign)."""
        signed = self.select is Select.SIGNED or self.method is CircuitMethod.OPTIMIZE
        return (self.select,) if self.curve != (MIB,) or signed else (self.select, Select.SIGNED)

    def refined(self, count: int) -> int | None:
        """How many of the estimate's top edges are computed again exactly, checked against
        the graph's ``count`` edges."""
        if self.refine is None:
            return None
        return _fitting(self.refine, count, "--refine", whole="--method exact")


def _fitting(size: int, count: int, option: str, whole: str = ALL, unit: str = "edges") -> int:
    """``size`` of a graph's ``count`` edges (or nodes: ``unit``); more is refused, naming
    ``whole``, what asks for every one."""
    if size > count:
        raise UsageError(
            f"{option} {size} is more {unit} than the model's graph has ({count:,}): give "
            f"at most {count:,}, or {whole}"
        )
    return size


def _number(value: object, option: str, most: float, least_open: bool) -> None:
    """A number from 0 (``least_open``: above 0) to ``most``; NaN is none."""
    fits = False
    if isinstance(value, int | float) and not isinstance(value, bool):
        fits = (value > 0 if least_open else value >= 0) and value <= most
    if not fits:
        low = "above 0" if least_open else "0 or more"
        raise UsageError(f"{option} is a number {low}, at most {most:g}, not {value!r}")


def _count(value: object, option: str, least: int, most: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UsageError(f"{option} is a whole number of at least {least}, not {value!r}")
    if most is not None and value > most:
        raise UsageError(f"{option} is at most {most:,}, not {value:,}")


# What a caller may set of the options by keyword (the file's circuit is read, not given).
_KEYWORDS = tuple(declared.name for declared in fields(CircuitOptions) if declared.name != "given")


def circuit_options(options: Mapping[str, Any]) -> tuple[CircuitOptions, dict[str, Any]]:
    """The circuit's options among keyword arguments (``Extractor.circuit``'s ``method="ig",
    edges=50``), checked, and the others: the request's fields."""
    mine = {name: value for name, value in options.items() if name in _KEYWORDS}
    if "curve" in mine:
        mine["curve"] = tuple(mine["curve"])
    rest = {name: value for name, value in options.items() if name not in _KEYWORDS}
    return CircuitOptions(**mine), rest
