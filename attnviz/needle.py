"""A needle-in-a-haystack sweep and the retrieval heads it finds: the definitions and the
results, free of any model (:mod:`attnviz.pretrained.needle` runs a model through it).

A cell of the sweep is a prompt of a given length in tokens: filler text (the haystack)
with a sentence (the needle) put in at a given depth, at a sentence's end, and a question
after it whose answer is in the needle. The model answers greedily; the cell is answered
when the answer comes back in what it wrote.

A head's retrieval score in a cell (Wu et al. 2024, "Retrieval Head Mechanistically
Explains Long-Context Factuality") is the fraction of the answer's tokens in the needle
that the head copies: the answer's token at needle position j counts when, at a step
where the model writes that same token, the key the head gives the most weight to is j.
Its span mass is the weight the head gives the needle's tokens, averaged over the
steps. Over a sweep, a head's retrieval score is its mean over the answered cells (the
paper's), its span mass the mean over every cell.

Shape letters: G steps (tokens written), L layers, H heads, A the answer's positions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnviz.errors import UsageError

THOUSAND = 1000  # what k means in --lengths: 32k is 32,000 tokens, below 32,768 positions
DEFAULT_NEEDLE = "The secret code that opens the old lighthouse is 7421."
DEFAULT_QUESTION = "What is the secret code that opens the old lighthouse?"
DEFAULT_ANSWER = "7421"
DEFAULT_LENGTHS = "1k,2k,4k"
DEFAULT_DEPTHS = "0,0.25,0.5,0.75,1"


def parse_lengths(text: str) -> tuple[int, ...]:
    """``1k,4k,16k`` (k: a thousand tokens) or plain numbers of tokens, each at least 1."""
    lengths = []
    for part in _parts(text, "--lengths"):
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(k?)", part.lower())
        if match is None:
            raise UsageError(
                f"--lengths takes token counts such as 1k,4k,16k or 2500, not {part!r}"
            )
        count = float(match[1]) * (THOUSAND if match[2] else 1)
        if count < 1 or count != int(count):
            raise UsageError(f"--lengths: {part} is not a whole number of tokens")
        lengths.append(int(count))
    return tuple(dict.fromkeys(lengths))


def parse_depths(text: str) -> tuple[float, ...]:
    """Where the needle goes, as fractions of the haystack: 0 (its start) to 1 (its end)."""
    depths = []
    for part in _parts(text, "--depths"):
        try:
            depth = float(part)
        except ValueError:
            raise UsageError(f"--depths takes fractions such as 0,0.5,1, not {part!r}") from None
        if not 0 <= depth <= 1:
            raise UsageError(f"--depths: {part} is outside [0, 1] (0: the start, 1: the end)")
        depths.append(depth)
    return tuple(dict.fromkeys(depths))


def parse_cell(text: str) -> tuple[int, float]:
    """``16k,0.5``: one cell of a sweep, its length and its depth."""
    parts = _parts(text, "--cell")
    if len(parts) != 2:
        raise UsageError(f"--cell takes a length and a depth such as 16k,0.5, not {text!r}")
    (length,), (depth,) = parse_lengths(parts[0]), parse_depths(parts[1])
    return length, depth


def _parts(text: str, option: str) -> list[str]:
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise UsageError(f"{option} takes a list separated by commas, not {text!r}")
    return parts


@dataclass(frozen=True)
class Needle:
    """The sentence hidden in the haystack, the question asked after it and its answer,
    which must be part of the needle (the tokens a retrieval head copies)."""

    needle: str = DEFAULT_NEEDLE
    question: str = DEFAULT_QUESTION
    answer: str = DEFAULT_ANSWER

    def __post_init__(self) -> None:
        for name in ("needle", "question", "answer"):
            if not getattr(self, name).strip():
                raise UsageError(f"the {name} is empty")
        if self.answer not in self.needle:
            raise UsageError(
                f"the answer {self.answer!r} is not in the needle {self.needle!r}: a retrieval "
                "head copies the answer from the needle"
            )

    @property
    def asked(self) -> str:
        """What follows the haystack: the question, and where the answer begins."""
        return (
            f"\n\nBased on the text above, answer the question.\nQuestion: {self.question}\nAnswer:"
        )


@dataclass(frozen=True)
class Sweep:
    """The cells asked for: every length at every depth."""

    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    needle: Needle = field(default_factory=Needle)
    max_new_tokens: int = 24
    chat: bool = False  # each prompt one user message, through the model's chat template
    strips_of: tuple[int, float] | None = None  # the cell whose rows are kept, pooled

    def __post_init__(self) -> None:
        if not self.lengths or not self.depths:
            raise UsageError("a sweep needs at least one length and one depth")
        if self.max_new_tokens < 1:
            raise UsageError("max_new_tokens must be at least 1")
        if self.strips_of is not None and self.strips_of not in self.cells():
            length, depth = self.strips_of
            raise UsageError(
                f"--cell {length},{depth:g} is not a cell of the sweep: give one of --lengths "
                f"{','.join(map(str, self.lengths))} and one of --depths "
                f"{','.join(f'{each:g}' for each in self.depths)}"
            )

    def cells(self) -> list[tuple[int, float]]:
        return [(length, depth) for length in self.lengths for depth in self.depths]

    def middle_cell(self) -> tuple[int, float]:
        """The cell drawn when none is named: the longest prompt, the middle depth."""
        return max(self.lengths), self.depths[len(self.depths) // 2]


def answered(response: str, answer: str) -> bool:
    """Whether the answer came back: found in what was written, case and spacing aside."""

    def plain(text: str) -> str:
        return " ".join(text.lower().split())

    return plain(answer) in plain(response)


def retrieval_scores(
    top_keys: np.ndarray, written: Sequence[int], prompt: Sequence[int], answer: Sequence[int]
) -> np.ndarray:
    """Each head's retrieval score, (L, H): the fraction of the ``answer``'s positions j
    such that at some step the token written is ``prompt[j]`` and the head's most-weighted
    key is j. ``top_keys`` (G, L, H) holds each step's most-weighted key (a position of
    the whole sequence); ``written`` (G,) the token written at each step."""
    positions = np.asarray(answer)  # (A,)
    tokens = np.asarray(prompt)[positions]  # (A,)
    copied = np.zeros((*top_keys.shape[1:], len(positions)), dtype=bool)  # (L, H, A)
    for step, token in enumerate(written):
        copied |= (top_keys[step][..., None] == positions) & (tokens == token)
    return copied.mean(axis=-1)


@dataclass(frozen=True)
class Strips:
    """Where every head looked while the model wrote, in one cell: each step's row over
    the prompt, pooled into bins of neighbouring positions (weights summed, so a bin
    holds the weight on its tokens; the weight on tokens written is left out)."""

    weights: np.ndarray  # (G, L, H, B)
    edges: np.ndarray  # (B + 1,): the first position of each bin, then the prompt's length
    written: list[str]  # the token each step wrote, as the tokenizer spells it

    def bin_of(self, position: int) -> int:
        return int(np.searchsorted(self.edges, position, side="right")) - 1


def bin_edges(length: int, bins: int) -> np.ndarray:
    """(B + 1,): where each of ``bins`` bins of a prompt of ``length`` tokens starts (a bin
    holds the positions p with p * B // length == its index), then ``length``."""
    return -(-np.arange(bins + 1) * length // bins)


@dataclass
class Cell:
    """One prompt of the sweep and what the model did with it."""

    length: int  # asked for, in tokens
    depth: float
    tokens: int  # the prompt's own length in tokens
    needle: tuple[int, int]  # the needle's first token and the one after its last
    answer: list[int]  # the positions of the answer's tokens inside the needle
    response: str  # what the model wrote
    answered: bool
    retrieval: np.ndarray  # (L, H)
    span: np.ndarray  # (L, H): mean weight on the needle over the steps
    strips: Strips | None = None  # the sweep's strips_of cell only

    def record(self) -> dict[str, object]:
        return {
            "length": self.length,
            "depth": self.depth,
            "tokens": self.tokens,
            "needle_start": self.needle[0],
            "needle_end": self.needle[1],
            "answer_positions": self.answer,
            "response": self.response,
            "answered": self.answered,
            "retrieval": self.retrieval.tolist(),
            "span": self.span.tolist(),
        }


@dataclass(frozen=True)
class HeadScore:
    layer: int
    head: int
    retrieval: float | None  # mean over the answered cells; None: no cell was answered
    span: float  # mean over every cell


@dataclass
class NeedleResults:
    """A whole sweep: each cell, and each head's scores over the cells."""

    model: str
    sweep: Sweep
    cells: list[Cell]

    @property
    def shape(self) -> tuple[int, int]:
        """(layers, heads)."""
        layers, heads = self.cells[0].retrieval.shape
        return layers, heads

    def heads(self) -> list[HeadScore]:
        """Every head, the best retriever first (then the most weight on the needle)."""
        answered_cells = [cell.retrieval for cell in self.cells if cell.answered]
        retrieval = np.mean(answered_cells, axis=0) if answered_cells else None
        span = np.mean([cell.span for cell in self.cells], axis=0)
        layers, heads = self.shape
        scores = [
            HeadScore(
                layer,
                head,
                None if retrieval is None else float(retrieval[layer, head]),
                float(span[layer, head]),
            )
            for layer in range(layers)
            for head in range(heads)
        ]
        return sorted(scores, key=lambda score: (-(score.retrieval or 0.0), -score.span))

    @property
    def planned(self) -> int:
        """How many cells the sweep has."""
        return len(self.sweep.cells())

    @property
    def partial(self) -> bool:
        """Stopped before its last cell (Ctrl-C, SIGTERM): the finished cells alone."""
        return len(self.cells) < self.planned

    def answered_share(self) -> float:
        return sum(cell.answered for cell in self.cells) / len(self.cells)

    def grid(self) -> np.ndarray:
        """(lengths, depths): 1 where the cell was answered, 0 where not."""
        lengths, depths = self.sweep.lengths, self.sweep.depths
        grid = np.full((len(lengths), len(depths)), math.nan)
        for cell in self.cells:
            grid[lengths.index(cell.length), depths.index(cell.depth)] = float(cell.answered)
        return grid

    def document(self, top: int | None = None) -> dict[str, object]:
        """The sweep as a JSON document's fields."""
        layers, heads = self.shape
        needle = self.sweep.needle
        return {
            "model": self.model,
            "needle": needle.needle,
            "question": needle.question,
            "answer": needle.answer,
            "lengths": list(self.sweep.lengths),
            "depths": list(self.sweep.depths),
            "layers": layers,
            "heads_per_layer": heads,
            "answered": self.answered_share(),
            **({"partial": True, "cells_planned": self.planned} if self.partial else {}),
            "cells": [cell.record() for cell in self.cells],
            "heads": [vars(score) for score in self.heads()[:top]],
        }

    def rows(self) -> list[dict[str, object]]:
        """A row per cell and head, for csv."""
        return [
            {
                "length": cell.length,
                "depth": cell.depth,
                "tokens": cell.tokens,
                "answered": cell.answered,
                "layer": layer,
                "head": head,
                "retrieval": float(cell.retrieval[layer, head]),
                "span": float(cell.span[layer, head]),
            }
            for cell in self.cells
            for layer in range(cell.retrieval.shape[0])
            for head in range(cell.retrieval.shape[1])
        ]


ROW_COLUMNS = ["length", "depth", "tokens", "answered", "layer", "head", "retrieval", "span"]
