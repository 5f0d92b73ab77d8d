"""A dataset of pairs checked against a model before any circuit is found on it
(``attnviz pairs check``): each pair tokenized as ``circuit`` reads it (its refusal, where
it would be refused, in the same words), its tokens counted, the model's clean and
corrupted metrics and the answer's rank read in one forward pass of each text, and the
pairs that repeat an earlier one named.

A pair the model does not answer (its answer not the likeliest next token) is not refused:
a circuit can be measured on it, but what it carries is not the task's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from attnviz.asked import check_asked, no_next_token
from attnviz.choices import Measure
from attnviz.circuits.options import CircuitOptions
from attnviz.circuits.pairs import UNALIKE, pair_error
from attnviz.errors import UsageError
from attnviz.inputs import Input
from attnviz.request import Request

if TYPE_CHECKING:
    from attnviz.extractor import Extractor
    from attnviz.pretrained.answered import Answered
    from attnviz.pretrained.extractor import PretrainedExtractor


class Counted(NamedTuple):
    """A pair's tokens: its text's and its twin's, and its answer's and versus answer's
    after the text (circuit reads the first of each)."""

    text: int
    corrupt: int | None
    answer: int
    versus: int | None


class Measured(NamedTuple):
    """The answer's rank after the clean text (1: the likeliest next token), and the
    metric after the clean text and after its twin."""

    rank: int
    clean: float
    corrupt: float | None


@dataclass(frozen=True)
class PairCheck:
    """One pair, as ``circuit`` would read it: its line (1 the first), its tokens and its
    metrics, the earlier line it repeats, if any, and the one line ``circuit`` refuses it
    with, where it would (then it has no tokens or metrics)."""

    line: int
    tokens: Counted | None = None
    measured: Measured | None = None
    repeats: int | None = None
    refused: str | None = None

    @property
    def answered(self) -> bool:
        """The model's likeliest next token after the clean text is the answer's."""
        return self.measured is not None and self.measured.rank == 1

    @property
    def prefers(self) -> bool:
        """The model prefers the answer to the versus answer after the clean text (their
        logit difference above 0; with no versus answer, the answer is its likeliest)."""
        if self.tokens is None or self.tokens.versus is None or self.measured is None:
            return self.answered
        return self.measured.clean > 0

    def fields(self) -> dict[str, Any]:
        """The check as one JSON object."""
        return {
            "line": self.line,
            "tokens": None if self.tokens is None else self.tokens._asdict(),
            "measured": None if self.measured is None else self.measured._asdict(),
            "repeats": self.repeats,
            "refused": self.refused,
        }

    def record(self) -> dict[str, Any]:
        """The check as a row of a table (csv): every column, empty where not reached."""
        tokens = dict.fromkeys(Counted._fields) | (
            {} if self.tokens is None else self.tokens._asdict()
        )
        measured = dict.fromkeys(Measured._fields) | (
            {} if self.measured is None else self.measured._asdict()
        )
        return {
            "line": self.line,
            **{f"{name}_tokens": value for name, value in tokens.items()},
            "rank": measured["rank"],
            "clean_metric": measured["clean"],
            "corrupt_metric": measured["corrupt"],
            "repeats": self.repeats,
            "refused": self.refused,
        }


@dataclass(frozen=True)
class PairsChecked:
    """Every pair's check, in the file's order, and the metric they were read by."""

    model: str
    metric: str
    pairs: tuple[PairCheck, ...]

    @property
    def refused(self) -> list[PairCheck]:
        return [each for each in self.pairs if each.refused is not None]

    @property
    def repeated(self) -> list[PairCheck]:
        return [each for each in self.pairs if each.repeats is not None]

    @property
    def answered(self) -> int:
        """How many pairs the model answers (its answer the likeliest next token)."""
        return sum(each.answered for each in self.pairs)

    @property
    def preferred(self) -> int:
        """How many pairs the model prefers the answer of (:attr:`PairCheck.prefers`)."""
        return sum(each.prefers for each in self.pairs)

    def records(self) -> list[dict[str, Any]]:
        """A row per pair, for a table of data (csv)."""
        return [each.record() for each in self.pairs]

    def document(self) -> dict[str, Any]:
        """The checks as one JSON document."""
        return {
            "model": self.model,
            "metric": self.metric,
            "pairs": len(self.pairs),
            "refused": len(self.refused),
            "repeated": len(self.repeated),
            "answered": self.answered,
            "preferred": self.preferred,
            "checks": [each.fields() for each in self.pairs],
        }


def checked_pairs(
    extractor: Extractor,
    pairs: Sequence[Input | Mapping[str, Any]],
    lines: list[int] | None = None,
    names: list[str] | None = None,
) -> PairsChecked:
    """Each of ``pairs`` (an Input, or a mapping of text, answer, versus, corrupt: a
    JSONL line) checked on the extractor's model as ``circuit`` reads it with its default
    options; ``lines``, their places in the file (1, 2, … by default), ``names`` what
    names each in a refusal ("pair 1"… by default)."""
    # the pretrained passes: a model is loaded
    from attnviz.pretrained.extractor import PretrainedExtractor

    if not isinstance(extractor, PretrainedExtractor):
        raise no_next_token(extractor.name, "a check of pairs")
    request = Request(maps=False, circuit=CircuitOptions())
    lines = list(range(1, len(pairs) + 1)) if lines is None else lines
    first: dict[Input, int] = {}
    versus: bool | None = None  # whether the first pair read has a versus answer
    found = []
    for place, (line, given) in enumerate(zip(lines, pairs, strict=True)):
        try:
            pair = as_pair(given)
            check_asked(request, pair)
            if versus is not None and (pair.versus is not None) != versus:
                raise UsageError(UNALIKE)
            versus = pair.versus is not None
            check = _checked(extractor, pair, request, line)
        except UsageError as error:
            refused = pair_error(error, place, len(pairs), names)
            found.append(PairCheck(line, refused=refused))
            continue
        repeats = first.setdefault(pair, line)
        found.append(check if repeats == line else replace(check, repeats=repeats))
    metric = Measure.LOGIT_DIFFERENCE if versus else Measure.LOG_PROB
    return PairsChecked(extractor.name, metric.value, tuple(found))


PAIR_FIELDS = ("text", "answer", "versus", "corrupt")  # what a pair holds, in this order


def as_pair(given: Input | Mapping[str, Any]) -> Input:
    """A pair as given, or made of a mapping of its fields (a JSONL line's)."""
    if isinstance(given, Input):
        return given
    text = given.get("text")
    if not isinstance(text, str):
        raise UsageError('no "text": each pair holds text, answer and corrupt (and versus)')
    answer, versus, corrupt = (given.get(name) for name in PAIR_FIELDS[1:])
    return Input(text, answer=answer, versus=versus, corrupt=corrupt)


def _checked(
    extractor: PretrainedExtractor, given: Input, request: Request, line: int
) -> PairCheck:
    """One pair's counts and metrics, or the refusal ``circuit`` would give it."""
    # torch and the pretrained passes: only once a model is loaded
    from attnviz.pretrained.answered import answered

    asked = answered(extractor, given, request)
    clean, rank = _metric_and_rank(extractor, asked, asked.arguments)
    corrupt = None
    if asked.corrupt_arguments is not None:
        corrupt, _ = _metric_and_rank(extractor, asked, asked.corrupt_arguments)
    text = asked.side.text
    assert given.answer is not None  # check_asked's
    counted = Counted(
        asked.side.length,
        None if asked.corrupt is None else asked.corrupt.length,
        tokens_after(extractor, text, given.answer),
        None if given.versus is None else tokens_after(extractor, text, given.versus),
    )
    return PairCheck(line, counted, Measured(rank, clean, corrupt))


def _metric_and_rank(
    extractor: PretrainedExtractor, asked: Answered, arguments: dict[str, Any]
) -> tuple[float, int]:
    """The metric after one forward pass on ``arguments``, and the answer's rank there."""
    import torch  # a model is loaded

    # torch at their top: only once a model is loaded
    from attnviz.pretrained.effects import last_logits
    from attnviz.pretrained.encoding import forward

    loaded = extractor.loaded
    with forward(loaded), torch.inference_mode():
        logits = last_logits(loaded.model, arguments).float()  # (1, vocabulary)
    answer = logits[0, asked.metric.answer_id]
    return float(asked.metric.of(logits)[0]), int((logits[0] > answer).sum()) + 1


def tokens_after(extractor: PretrainedExtractor, text: str, answer: str) -> int:
    """How many tokens ``answer`` adds after ``text``, as the tokenizer splits them
    together."""
    tokenizer = extractor.loaded.tokenizer
    alone = tokenizer(text, add_special_tokens=False)["input_ids"]
    return len(tokenizer(text + answer, add_special_tokens=False)["input_ids"]) - len(alone)


def split_pairs(
    pairs: Sequence[Mapping[str, Any]], held_out: float, seed: int
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], int]:
    """``pairs`` (JSONL lines) split into the ones a method is fitted on and the
    ``held_out`` share of them, by a shuffle drawn with ``seed``: distinct pairs only (a
    repeat of an earlier line left out and counted), so that no pair is on both sides.
    Each side keeps the file's order. The two sides, and how many repeats were left
    out."""
    import numpy as np  # the draw

    if isinstance(held_out, bool) or not 0 < held_out < 1:
        raise UsageError(f"--held-out is a share of the pairs between 0 and 1, not {held_out!r}")
    distinct: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for pair in pairs:
        distinct.setdefault(tuple(pair.get(name) for name in PAIR_FIELDS), pair)
    kept = list(distinct.values())
    count = round(len(kept) * held_out)
    if not 0 < count < len(kept):
        raise UsageError(
            f"--held-out {held_out:g} of {len(kept)} distinct pairs leaves a side empty: "
            "give more pairs or another share"
        )
    chosen = set(np.random.default_rng(seed).permutation(len(kept))[:count].tolist())
    held = [pair for place, pair in enumerate(kept) if place in chosen]
    fitted = [pair for place, pair in enumerate(kept) if place not in chosen]
    return fitted, held, len(pairs) - len(kept)
