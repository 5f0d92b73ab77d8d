"""The choices a user makes, as ``str`` enums: one name per concept, shared by the
library and the command line.

This module imports nothing but the standard library, so that the command line
can declare its options (and answer ``--help``) without numpy, torch or
matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, TypeVar

from attnviz.errors import UsageError

Choice = TypeVar("Choice", bound=StrEnum)


def chosen(
    choices: type[Choice], value: Choice | str, what: str, among: Iterable[Choice] | None = None
) -> Choice:
    """``value`` as one of ``choices`` (of those ``among`` them, if given); anything else
    is a usage error that lists them."""
    allowed = tuple(choices if among is None else among)
    try:
        member = choices(value)
    except ValueError:
        member = None
    if member not in allowed:
        names = ", ".join(member.value for member in allowed)
        raise UsageError(f"unknown {what} {value!r}: choose one of {names}")
    return member


class Mode(StrEnum):
    SELF = "self"  # every token attends to every token
    MASKED = "masked"  # causal: a token attends to itself and the tokens before it
    CROSS = "cross"  # target tokens attend over source tokens


class Attention(StrEnum):
    """How a pretrained model computes its attention while attnviz reads it."""

    AUTO = "auto"  # fused where attnviz can record it, else eager (said once)
    FUSED = "fused"  # the model's own fast kernel; weights computed by attnviz, block by block
    EAGER = "eager"  # the model's eager attention, which builds every head's whole maps


class Ablation(StrEnum):
    """What replaces a node's output where its effect on an answer is measured: one
    vocabulary, each word meaning the same wherever it is taken. ``heads --ablation`` takes
    the words of its row, :data:`ABLATION_LABELS` (what each reads beyond the text:
    :data:`ABLATION_NEEDS`; its replacement: ``attnviz.pretrained.effects.REPLACEMENTS``);
    ``circuit --ablation``, for an edge outside the circuit, those of :data:`INTERVENTIONS`."""

    ZERO = "zero"
    MEAN = "mean"
    PATCH = "patch"  # the node's value in the run on the corrupted text
    NONE = "none"  # no ablation sweep: dla, and patch where asked, alone


# The words heads --ablation takes: what each replaces a head's output by.
ABLATION_LABELS = {
    Ablation.ZERO: "its output zeroed",
    Ablation.MEAN: "its mean output over the text's positions",
    Ablation.NONE: "no ablation sweep: dla, and patch with --corrupt, alone",
}
# What an ablation reads beyond the text, where it reads more: "corrupt" (the corrupted
# twin: its replacement is the head's output in the run on it, which then must be given).
ABLATION_NEEDS: dict[Ablation, str] = {}


class Measure(StrEnum):
    """What effects on an answer are measured by, at the last position (``--metric``; by
    default the log-probability, or with a versus answer the logit difference). What each
    is and its unit: :data:`MEASURES`; its function of the logits:
    ``attnviz.pretrained.metrics.MEASURED``. A Python caller may give a function instead."""

    LOG_PROB = "log_prob"
    LOGIT_DIFFERENCE = "logit_difference"
    PROB = "prob"
    PROB_DIFFERENCE = "prob_difference"
    KL = "kl"


@dataclass(frozen=True)
class Measured:
    """A measure's words (``{answer}`` and ``{versus}`` stand for the tokens), its short
    name, its unit; whether it reads a versus answer (True: needs one; False: refuses
    one; None: reads neither, and takes either); whether it reads the clean run's
    next-token distribution (``clean``); whether its gradient at the clean run is 0
    (``flat_at_clean``: attribution patching, EAP, estimates nothing from it); whether it
    is linear in the last logits, so that a head's output has a direction to be read
    along (``direction``: direct logit attribution)."""

    label: str
    short: str
    unit: str
    versus: bool | None = False
    clean: bool = False
    flat_at_clean: bool = False
    direction: bool = True


MEASURES = {
    Measure.LOG_PROB: Measured("log-probability", "log-probability", "nats"),
    Measure.LOGIT_DIFFERENCE: Measured(
        "logit({answer}) − logit({versus})", "logit difference", "logits", versus=True
    ),
    Measure.PROB: Measured("p({answer})", "probability", "p", direction=False),
    Measure.PROB_DIFFERENCE: Measured(
        "p({answer}) − p({versus})",
        "probability difference",
        "p",
        versus=True,
        direction=False,
    ),
    Measure.KL: Measured(
        "KL(clean ‖ run) of the next token",
        "KL divergence from the clean run",
        "nats",
        versus=None,
        clean=True,
        flat_at_clean=True,
        direction=False,
    ),
}


class Method(StrEnum):
    """How an effect on an answer is measured."""

    EXACT = "exact"  # a forward pass per change (batched), the number itself
    # attribution patching: the linear estimate from one backward pass, ∂metric/∂a · Δa
    GRADIENT = "gradient"


class Site(StrEnum):
    """Where ``trace`` restores the clean run's activation, in each layer (what each one
    is, for help and pictures: :data:`SITE_LABELS`; where it is read in a model:
    ``attnviz.pretrained.sites.SITES``). A layer's site is restored a position at a time;
    a head's (q, k, v, z, pattern) a head at a time, over every position or one position
    at a time (the pattern's: a query's row)."""

    RESID = "resid"
    ATTN = "attn"
    RESID_MID = "resid_mid"
    MLP = "mlp"
    RESID_POST = "resid_post"
    Q = "q"
    K = "k"
    V = "v"
    Z = "z"
    PATTERN = "pattern"

    @property
    def of_heads(self) -> bool:
        """True where the site is split into heads (each restored alone)."""
        return self in HEAD_SITES


HEAD_SITES = frozenset({Site.Q, Site.K, Site.V, Site.Z, Site.PATTERN})

SITE_LABELS = {
    Site.RESID: "the residual stream entering the layer",
    Site.ATTN: "the attention block's output",
    Site.RESID_MID: "the residual stream between the attention and the MLP",
    Site.MLP: "the MLP's output",
    Site.RESID_POST: "the residual stream leaving the layer",
    Site.Q: "a head's queries, before rotary embeddings",
    Site.K: "a key/value head's keys, before rotary embeddings",
    Site.V: "a key/value head's values",
    Site.Z: "a head's output, before the output projection",
    Site.PATTERN: "a head's attention weights (by position: a query's row)",
}


class Weighting(StrEnum):
    """What attention weights are multiplied by before they are shown (``--weigh``)."""

    # a_ij · ‖W_O^h v_j‖: how much of key j the head's output actually carries; rows no
    # longer sum to 1 (a sink with a small value vector fades)
    VALUE = "value"


class Aggregate(StrEnum):
    """How maps are combined. The value is what documents store."""

    MEAN = "mean"  # mean over heads, a map per layer
    MAX = "max"  # max over heads, a map per layer
    MEAN_ALL = "mean-all"  # mean over layers and heads
    MAX_ALL = "max-all"  # max over layers and heads
    ROLLOUT = "rollout"  # attention rollout (Abnar & Zuidema 2020), over layers and heads
    FLOW = "flow"  # attention flow as maximum flow, over layers and heads

    @property
    def folds_layers(self) -> bool:
        """True when the result is one map in all, False when it is one map per layer."""
        return self not in (Aggregate.MEAN, Aggregate.MAX)

    @property
    def description(self) -> str:
        return {
            Aggregate.MEAN: "mean over heads",
            Aggregate.MAX: "max over heads",
            Aggregate.MEAN_ALL: "mean over layers and heads",
            Aggregate.MAX_ALL: "max over layers and heads",
            Aggregate.ROLLOUT: "rollout",
            Aggregate.FLOW: "flow",
        }[self]


class View(StrEnum):
    """What a picture shows. The terminal draws the first three, picture files and the
    interactive page the last three (attnviz.outputs says which output takes which)."""

    AUTO = "auto"  # the terminal: panels when they fit its height, else the grid
    PANELS = "panels"  # the terminal: a labelled heatmap per head
    GRID = "grid"  # the terminal: every layer x head as a small thumbnail
    HEAD = "head"  # one map (on the page: with its labels)
    LAYER = "layer"  # the heads of one layer (on the page: lines between tokens, a colour per head)
    MODEL = "model"  # every layer x head as small multiples


class Output(StrEnum):
    """Everything attnviz writes. Each command's --format takes some of them;
    attnviz.outputs declares each one's kind, suffixes and views."""

    TERMINAL = "terminal"  # heatmaps drawn with characters
    TABLE = "table"  # rows for a person to read
    JSON = "json"  # one document
    NDJSON = "ndjson"  # one document per line, for streams of inputs
    NPZ = "npz"  # numpy arrays and a meta JSON string
    CSV = "csv"  # long form, a row per value
    PNG = "png"
    SVG = "svg"
    PDF = "pdf"
    HTML = "html"  # the interactive page
    EAP_IG = "eap-ig"  # a circuit as hannamw/EAP-IG's graph file


class Foreign(NamedTuple):
    """Another tool's file of a circuit: how a message names it, and what ``circuit -f``'s
    help says of it (its writer: ``attnviz.circuits.foreign.WRITERS``)."""

    name: str
    help: str


# The outputs that are other tools' files of a circuit, written to stdout by ``circuit``.
FOREIGN_OUTPUTS = {
    Output.EAP_IG: Foreign(
        "EAP-IG's graph file",
        "the circuit as hannamw/EAP-IG's graph file (Graph.from_json reads it), its scores "
        "in MIB's sign (the loss's: an edge the answer needs is positive)",
    ),
}


class Dtype(StrEnum):
    """How stored weights are written."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"


class Projections(StrEnum):
    LEARNED = "learned"  # W_Q, W_K, W_V, W_O per head
    IDENTITY = "identity"  # Q = K = V = X: the plain attention of the textbook


class Engine(StrEnum):
    LOCAL = "local"  # this machine: worker processes for rendering (--jobs)
    RAY = "ray"  # a Ray cluster, or a local Ray: one model per worker


class CircuitMethod(StrEnum):
    """How ``circuit`` scores each edge (what each is: :data:`CIRCUIT_METHOD_LABELS`)."""

    EXACT = "exact"
    GRADIENT = "gradient"
    IG = "ig"
    RELP = "relp"
    OPTIMIZE = "optimize"


Twins = Callable[[list[str | None]], list[str | None]]


def _their_own(corrupts: list[str | None]) -> list[str | None]:
    return corrupts


def _none(corrupts: list[str | None]) -> list[str | None]:
    return [None] * len(corrupts)


class Intervened(NamedTuple):
    """What an intervention is, whether it reads the pairs' corrupted texts, and whether
    EAP-IG interpolates from the corrupted text's input embeddings (else from each group
    of nodes' ablated outputs, one group at a time: EAP-IG's activations); how captions
    name what an edge outside the circuit carries (``carried``), and the run with every
    edge carrying it (``emptied``); ``twins``, of each pair's corrupted text, the one
    each pair's passes run (none: the clean text's run, its nodes' outputs replaced as
    attnviz.circuits.driver's ``ABLATED`` says)."""

    label: str
    corrupt: bool
    from_inputs: bool
    carried: str
    emptied: str
    twins: Twins


# The words circuit --ablation takes: what an edge outside the circuit carries.
INTERVENTIONS = {
    Ablation.PATCH: Intervened(
        "its value in the run on the corrupted text",
        True,
        True,
        "the corrupted run's value",
        "corrupted",
        _their_own,
    ),
    Ablation.MEAN: Intervened(
        "the mean: every node's output replaced by its mean over every position of the "
        "pairs' clean texts",
        False,
        False,
        "its upstream node's mean output",
        "every edge mean-ablated",
        _none,
    ),
    Ablation.ZERO: Intervened(
        "zero: every node's output replaced by 0 in the clean text's run",
        False,
        False,
        "zero",
        "every edge zeroed",
        _none,
    ),
}


class Select(StrEnum):
    """How a circuit's edges are chosen from the scores (:mod:`attnviz.circuits.selections`)."""

    TOP = "top"  # the N edges of largest |score|
    GREEDY = "greedy"  # EAP-IG's: from the logits up, an edge only into a node already kept
    THRESHOLD = "threshold"  # every edge of |score| at least T
    # the N edges of largest score in MIB's sign (the answer's support first): MIB's CPR
    SIGNED = "signed"
    # exactly N edges of largest summed |score| without a dead end, as an integer program
    ILP = "ilp"


class Count(StrEnum):
    """How a circuit's edges are counted, in its sizes, fractions and what it keeps."""

    GROUPED = "grouped"  # a key/value head's key and value inputs once, as the model has them
    # once per query head reading them, as MIB's (TransformerLens's ungrouped) graph has them
    UNGROUPED = "ungrouped"


class Level(StrEnum):
    """What a circuit is chosen by: its edges, or its nodes (heads and MLPs)."""

    EDGE = "edge"
    NODE = "node"  # the nodes of largest |score|, the edges between them


CIRCUIT_METHOD_LABELS = {
    CircuitMethod.EXACT: "a forward pass per edge, batched",
    CircuitMethod.GRADIENT: "edge attribution patching, EAP: one forward and one backward pass",
    CircuitMethod.IG: "EAP with integrated gradients, EAP-IG: --steps backward passes; with "
    "--ablation mean or zero, over each group of nodes' outputs in turn: (1 + 2 × layers) × "
    "--steps",
    CircuitMethod.RELP: "relevance patching, RelP: EAP's passes, the gradient by relevance "
    "propagation (norms' divisors and attention weights held, activations by the identity "
    "rule, a gate's product halved)",
    CircuitMethod.OPTIMIZE: "a mask over the edges trained for faithfulness from EAP-IG's "
    "scores (EAP's with --ablation mean or zero, without --steps): --train-steps forward and "
    "backward passes",
}


def labelled(labels: dict[Any, str]) -> str:
    """A vocabulary's words each with what it is, as an option's help lists them: ``zero
    (…), mean (…)``."""
    return ", ".join(f"{word} ({label})" for word, label in labels.items())
