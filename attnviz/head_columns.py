"""Every column ``heads`` lists and ``stats`` sums, declared once.

A column is one row of :class:`HeadColumn`: its name, its help, what it needs of the
maps, how it is finished from the sums the blocks add (its denominator), whether it is a
detector's score, where the terminal's tables show it and which way it sorts. The
enums of the options (``--sort``, ``--by``, ``--detect``), the corpus statistics and the
help texts (and so ``docs/cli.md``, written from them) are derived from it. A new
statistic is a row here and its arithmetic, by name, in
:class:`~attnviz.analysis.products.HeadStatisticsProduct`.

Standard library only: the command line reads this module to declare its options.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Needs(StrEnum):
    """What maps must hold for a statistic to apply (elsewhere it is None)."""

    ANY = "any"
    ONE_SEQUENCE = "one sequence"  # queries and keys are the same tokens (self, masked)
    SPAN = "span"  # the keys of --span
    REPEATS = "repeats"  # one sequence, with the tokens that say which ones repeat
    ANSWER = "answer"  # a causal language model's answer (--answer): a head's effect on it
    CORRUPT = "corrupt"  # an answer and the text's corrupted twin (--corrupt): patching
    KINDS = "layer kinds"  # a model whose layers differ in what they read (sliding, global)


class Per(StrEnum):
    """What a summed statistic is divided by: its denominator."""

    ROW = "row"  # every query row read
    FOLLOWING_ROW = "following row"  # the rows with a token before them
    WEIGHT_AFTER_FIRST = "weight after the first key"  # TransformerLens's exclude_bos


@dataclass(frozen=True)
class Column:
    """One column's declaration (a member of :class:`HeadColumn` carries it)."""

    name: str
    help: str  # for a table's caption and the docs ("" for a head's place)
    per: Per | None = None  # a mean the blocks sum; None: a head's place or its top key
    needs: Needs = Needs.ANY
    detector: bool = False  # a head detector's score (TransformerLens's detect_head)
    beside_detectors: bool = False  # shown in the detectors' table too (detectors are)
    ascending: bool = False  # sorted smallest first (places), else largest first
    in_corpus: bool | None = None  # summed over a corpus by stats (None: if per is given)
    # In the terminal's table of statistics, which fits 80 characters: a column left out
    # is shown there when the table is sorted by it (data holds every column).
    in_terminal: bool = True


class HeadColumn(StrEnum):
    """The columns of ``heads``: a head's place and its statistics, in the order they
    are listed; each member is its :class:`Column` declaration."""

    _value_: str
    help: str
    per: Per | None
    needs: Needs
    detector: bool
    beside_detectors: bool
    ascending: bool
    in_corpus: bool
    in_terminal: bool

    def __new__(cls, column: Column | str) -> HeadColumn:
        # Called with each member's Column as the class is made; HeadColumn("sink") later
        # is Enum's lookup by value, which never reaches here.
        assert isinstance(column, Column)
        member = str.__new__(cls, column.name)
        member._value_ = column.name
        member.help = column.help
        member.per = column.per
        member.needs = column.needs
        member.detector = column.detector
        member.beside_detectors = column.beside_detectors or column.detector
        member.ascending = column.ascending
        member.in_corpus = column.per is not None if column.in_corpus is None else column.in_corpus
        member.in_terminal = column.in_terminal
        return member

    # A head's place needs no help in a table's caption.
    LAYER = Column("layer", "", beside_detectors=True, ascending=True)
    HEAD = Column("head", "", beside_detectors=True, ascending=True)
    KIND = Column(
        "kind",
        "the layer's attention: global, or sliding N (each query reads at most the N keys "
        "up to itself)",
        needs=Needs.KINDS,
        ascending=True,
    )
    # Effects on an answer: read from the model's output, not from the maps (no per).
    ABLATION = Column(
        "ablation",
        "change in the answer's log-probability (nats; with --versus, in the logit "
        "difference) with the head's output zeroed (--ablate mean: its mean over the "
        "text): below 0, the answer needs the head",
        needs=Needs.ANSWER,
        ascending=True,
        in_corpus=True,
    )
    DLA = Column(
        "dla",
        "direct logit attribution: what the head's output at the last position adds to the "
        "answer's logit (with --versus, less the versus answer's), through the final norm "
        "at its clean scale",
        needs=Needs.ANSWER,
        in_corpus=True,
    )
    PATCH = Column(
        "patch",
        "how much of the metric comes back when the head's clean output is put into the "
        "run on the --corrupt text, at every position",
        needs=Needs.CORRUPT,
        in_corpus=True,
    )
    ENTROPY = Column(
        "entropy",
        "entropy of a query row in nats, averaged over rows (ln of the key count when "
        "uniform, 0 when all weight is on one key)",
        Per.ROW,
    )
    DISTANCE = Column(
        "distance",
        "mean |query position − key position| weighted by attention (self and masked only)",
        Per.ROW,
        Needs.ONE_SEQUENCE,
    )
    SINK = Column(
        "sink",
        "mean weight on the first token and on special tokens ([CLS], <s>, …) as the "
        "tokenizer marks them",
        Per.ROW,
        beside_detectors=True,
    )
    PREVIOUS = Column(
        "previous",
        "mean weight a token gives the token just before it",
        Per.FOLLOWING_ROW,
        Needs.ONE_SEQUENCE,
    )
    SELF = Column("self", "mean weight a token gives itself", Per.ROW, Needs.ONE_SEQUENCE)
    SPAN = Column(
        "span",
        "mean weight on the keys of --span: how much a head reads of a passage",
        Per.ROW,
        Needs.SPAN,
        beside_detectors=True,
    )
    PREVIOUS_TOKEN = Column(
        "previous_token",
        "TransformerLens's previous-token score: weight on the token just before, over all "
        "weight off the first token",
        Per.WEIGHT_AFTER_FIRST,
        Needs.REPEATS,
        detector=True,
    )
    DUPLICATE_TOKEN = Column(
        "duplicate_token",
        "TransformerLens's duplicate-token score: weight on earlier copies of the token, "
        "over all weight off the first token",
        Per.WEIGHT_AFTER_FIRST,
        Needs.REPEATS,
        detector=True,
    )
    INDUCTION = Column(
        "induction",
        "TransformerLens's induction score: weight on the token after an earlier copy of "
        "the token, over all weight off the first token",
        Per.WEIGHT_AFTER_FIRST,
        Needs.REPEATS,
        detector=True,
    )
    TOP_KEY_POSITION = Column(
        "top_key_position",
        "the position of that key (0: the first token)",
        ascending=True,
        in_corpus=True,
    )
    TOP_KEY = Column(
        "top_key",
        "the key token with the most weight, summed over query rows",
        beside_detectors=True,
        ascending=True,
    )

    @property
    def one_sequence_only(self) -> bool:
        """It compares query and key positions or tokens, which cross attention and the
        maps between two sentences do not share."""
        return self.needs in (Needs.ONE_SEQUENCE, Needs.REPEATS)


# What the blocks sum (the means), in the order of their slots in the product's sums.
SUMMED = tuple(column for column in HeadColumn if column.per is not None)
DETECTORS = tuple(column for column in HeadColumn if column.detector)
CORPUS = tuple(column for column in HeadColumn if column.in_corpus)  # what stats sums
EFFECTS = tuple(column for column in HeadColumn if column.needs is Needs.ANSWER)
RANKED = SUMMED + EFFECTS  # what --top-heads can rank heads by

# The options' choices, derived from the columns. The functional API builds an enum from
# the declarations; a type checker cannot see its members, so code compares values.
RankBy = StrEnum(  # type: ignore[misc]
    "RankBy", {column.name: column.value for column in RANKED}, module=__name__
)
Detector = StrEnum(  # type: ignore[misc]
    "Detector", {column.name: column.value for column in DETECTORS}, module=__name__
)
RankBy.__doc__ = "The statistics heads can be ranked by (``--top-heads N --by``)."
Detector.__doc__ = "The head detectors (TransformerLens's), named as their ``heads`` columns."


def listed(columns: tuple[HeadColumn, ...] | list[HeadColumn]) -> str:
    """'a, b, c or d': column names for a help text or a message."""
    names = [column.value for column in columns]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@dataclass(frozen=True)
class HeadStatistics:
    """One head's row: its place, its statistics by name (None where one does not apply)
    and its top key. ``row.entropy`` reads a statistic as an attribute."""

    layer: int
    head: int
    values: dict[str, float | None]  # every summed statistic, in HeadColumn's order
    top_key_position: int
    top_key: str
    kind: str | None = None  # the layer's attention, where the model's layers differ

    def __getattr__(self, name: str) -> float | None:
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __getitem__(self, column: HeadColumn | str) -> Any:  # int, float, str or None
        """The value of one column, a place, a statistic, an effect or the top key (None
        for an effect on no answer)."""
        column = HeadColumn(column)
        if column.value in self.values:
            return self.values[column.value]
        effect = column.needs in (Needs.ANSWER, Needs.CORRUPT)
        return None if effect else getattr(self, column.value)

    def as_dict(self) -> dict[str, int | float | str | None]:
        """Every column of the row: the effects where it has them."""
        optional = (Needs.ANSWER, Needs.CORRUPT, Needs.KINDS)  # only where the row has them
        return {
            column.value: self[column]
            for column in HeadColumn
            if column.needs not in optional or self[column] is not None
        }
