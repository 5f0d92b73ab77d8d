"""`attnviz circuit`'s choices of how edges are scored and which circuits are measured:
one option per field of :class:`~attnviz.circuits.options.CircuitOptions`, named as it is,
given to the command as one bundle (:class:`CircuitChoices`) that makes the options."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated

import typer

from attnviz.choices import (
    CIRCUIT_METHOD_LABELS,
    INTERVENTIONS,
    Ablation,
    CircuitMethod,
    Count,
    Level,
    Select,
)
from attnviz.circuits.mib import MIB
from attnviz.circuits.options import (
    ALL,
    DEFAULT_EDGES,
    DEFAULT_LEARNING_RATE,
    DEFAULT_SPARSITY,
    DEFAULT_STEPS,
    DEFAULT_TRAIN_STEPS,
    MOST_LEARNING_RATE,
    MOST_RESAMPLES,
    MOST_SPARSITY,
    MOST_STEPS,
    MOST_TRAIN_STEPS,
    CircuitOptions,
)
from attnviz.cli import declarations as d
from attnviz.cli.bundles import bundle
from attnviz.errors import UsageError

MethodOption = d.choice_option(
    CircuitMethod, "--method", "How each edge is scored", CIRCUIT_METHOD_LABELS
)
StepsOption = Annotated[
    int | None,
    typer.Option(
        "--steps",
        metavar="N",
        min=1,
        help=f"EAP-IG's points between the corrupted and the clean input embeddings, or "
        f"with --ablation mean or zero between each group of nodes' ablated and clean "
        f"outputs (--method ig, and optimize's start; {DEFAULT_STEPS} by default, at most "
        f"{MOST_STEPS:,}).",
    ),
]
TrainStepsOption = Annotated[
    int | None,
    typer.Option(
        "--train-steps",
        metavar="N",
        help=f"--method optimize: Adam's steps, a pair each ({DEFAULT_TRAIN_STEPS} by default, "
        f"at most {MOST_TRAIN_STEPS:,}).",
    ),
]
LearningRateOption = Annotated[
    float | None,
    typer.Option(
        "--learning-rate",
        metavar="R",
        help="--method optimize: Adam's learning rate on the mask's logits "
        f"({DEFAULT_LEARNING_RATE:g} by default; above 0, at most {MOST_LEARNING_RATE:g}).",
    ),
]
SparsityOption = Annotated[
    float | None,
    typer.Option(
        "--sparsity",
        metavar="S",
        help=f"--method optimize: the weight of the mask's mean in the loss, beside the "
        f"squared share of the answer lost ({DEFAULT_SPARSITY:g} by default; 0 to "
        f"{MOST_SPARSITY:g}).",
    ),
]
TrainEachOption = Annotated[
    bool,
    typer.Option(
        "--train-each",
        help="--method optimize with --curve: train a circuit at each size of the curve, "
        "smallest first, each holding the one before it (one training each, each pass "
        "keeping exactly its size's edges: no --sparsity), instead of reading every size "
        "from the one trained for the circuit.",
    ),
]
AblationOption = d.choice_option(
    Ablation,
    ("--ablation", "--ablate"),
    "What an edge outside the circuit carries, in scoring and in faithfulness",
    {kind: each.label for kind, each in INTERVENTIONS.items()},
)
RefineOption = Annotated[
    int | None,
    typer.Option("--refine", metavar="K", help="Score the estimate's top K edges again exactly."),
]
EdgesOption = Annotated[
    str | None,
    typer.Option(
        "--edges",
        metavar="N",
        help=f"The circuit: the N edges of largest |score| ({ALL} or 0 allowed; "
        f"{DEFAULT_EDGES} by default, or every edge where there are fewer). Its faithfulness: "
        "(m(circuit) - m(corrupt)) / (m(clean) - m(corrupt)), every edge outside it "
        "carrying the corrupted run's value.",
    ),
]
SelectOption = Annotated[
    Select,
    typer.Option(
        "--select",
        case_sensitive=False,
        help="How the circuit is chosen from the scores: top (the --edges N of largest "
        "|score|), greedy (EAP-IG's: from the logits up, an edge only into a node already "
        "kept), threshold (every edge of |score| at least --threshold), signed (the --edges N "
        "of largest score in MIB's sign, the answer's support first: the circuits MIB's CPR "
        "is read from) or ilp (exactly --edges N of largest summed |score| without a dead "
        "end, an integer program solved by scipy's HiGHS).",
    ),
]
CountOption = Annotated[
    Count,
    typer.Option(
        "--count",
        case_sensitive=False,
        help="How edges are counted in --edges, --curve (MIB's fractions too) and what a "
        "circuit keeps: grouped (a key/value head's key and value inputs once, as the model "
        "computes them) or ungrouped (once per query head, as MIB's graph counts them, each "
        "copy ranked by an equal share of the score).",
    ),
]
SpansOption = Annotated[
    list[str] | None,
    typer.Option(
        "--spans",
        metavar="[NAME=]SPEC",
        help="Split each edge's score by where in the context it runs: a span of each pair's "
        "tokens, again for more (text:7421 or any words: the tokens covering their first "
        "occurrence; 3-5 or 0,2: positions; needle=text:7421 names it; a bare name: the span "
        'of that name in each pair\'s own "spans"); every position no span names falls in a '
        "last span, rest. An edge into a query, an MLP or the logits "
        "lies where its input is read; into a key or a value, at the key's position.",
    ),
]
ByPositionOption = Annotated[
    bool,
    typer.Option(
        "--by-position",
        help="Split each edge's score by position: every token its own span (pairs of one "
        "token length).",
    ),
]
LevelOption = Annotated[
    Level,
    typer.Option(
        "--level",
        case_sensitive=False,
        help="What the circuit is chosen by: edge (its edges' scores), or node (heads and "
        "MLPs by their own scores: --method exact patches each node, an estimate sums its "
        "edges'; the circuit is the edges between the nodes chosen).",
    ),
]
NodesOption = Annotated[
    str | None,
    typer.Option(
        "--nodes",
        metavar="N",
        help="--level node's circuit: the N nodes of largest |score| (all allowed; 20 by "
        "default, or every node where there are fewer).",
    ),
]
BootstrapOption = Annotated[
    int | None,
    typer.Option(
        "--bootstrap",
        metavar="B",
        help="Bootstrap every edge's score over B resamples of the pairs (2 to "
        f"{MOST_RESAMPLES}): the mean of the resamples' means, 0 where an edge's sign turns "
        "between them.",
    ),
]
ThresholdOption = Annotated[
    float | None,
    typer.Option("--threshold", metavar="T", help="--select threshold's least |score|."),
]
PruneOption = Annotated[
    bool,
    typer.Option(
        "--prune/--no-prune",
        help="Take the circuit's dead ends out (edges from a node no edge of it enters, or "
        "into a node no edge of it leaves), as EAP-IG's code does: the sizes asked and kept "
        "are both said.",
    ),
]
ScoresOption = Annotated[
    str | None,
    typer.Option(
        "--scores",
        metavar="FILE.json",
        help="Take every edge's score (and both runs' metrics) from a circuit written by "
        "circuit -f json over the same pairs, not scoring again: measure other sizes, "
        "selections or a curve, or draw it (a circuit split by span: with the --spans it was "
        "scored with).",
    ),
]
CurveOption = Annotated[
    str | None,
    typer.Option(
        "--curve",
        metavar="N,N,…",
        help=f"Measure the faithfulness of the circuits of these sizes too (10,30,100,300; "
        f"{ALL}: every edge); a size given twice is measured once. {MIB}: MIB's ten fractions "
        "of the edges (of the nodes, with --level node), chosen by --select and by signed, "
        "and its CPR (from the signed circuits, as MIB reads it) and CMD (from --select's).",
    ),
]


@dataclass(frozen=True)
class CircuitChoices:
    """The options of :class:`CircuitOptions` as the command line gives them (a size or
    "all" as text), each field named as the option's field."""

    method: MethodOption = CircuitMethod.GRADIENT
    steps: StepsOption = None
    refine: RefineOption = None
    edges: EdgesOption = None
    select: SelectOption = Select.TOP
    threshold: ThresholdOption = None
    prune: PruneOption = True
    level: LevelOption = Level.EDGE
    nodes: NodesOption = None
    scores: ScoresOption = None
    curve: CurveOption = None
    bootstrap: BootstrapOption = None
    train_steps: TrainStepsOption = None
    learning_rate: LearningRateOption = None
    sparsity: SparsityOption = None
    train_each: TrainEachOption = False
    ablation: AblationOption = Ablation.PATCH
    count: CountOption = Count.GROUPED
    spans: SpansOption = None
    by_position: ByPositionOption = False

    def options(self) -> CircuitOptions:
        """The options these choices make, checked."""
        given = {field.name: getattr(self, field.name) for field in fields(self)}
        given["spans"] = tuple(self.spans or ())
        given["edges"] = _count_of(self.edges, "--edges")
        given["nodes"] = _count_of(self.nodes, "--nodes")
        given["curve"] = _sizes(self.curve)
        return CircuitOptions(**given)


circuit_choices = bundle("choices", CircuitChoices)


def _count_of(value: str | None, option: str) -> int | str | None:
    """--edges' or --nodes' value: a number, or all."""
    if value is None or value == ALL:
        return value
    try:
        return int(value)
    except ValueError:
        what = option.removeprefix("--")
        raise UsageError(f"{option} is a number of {what} or {ALL}, not {value!r}") from None


def _sizes(value: str | None) -> tuple[int | str, ...]:
    if value is None:
        return ()
    try:
        return tuple(part if part in (ALL, MIB) else int(part) for part in value.split(","))
    except ValueError:
        raise UsageError(
            f"--curve is numbers of edges (or {ALL}) with commas between, or {MIB}, not {value!r}"
        ) from None
