"""Where in a pair's context an edge carries its effect: the positions cut into named
spans (``--spans``) or each its own (``--by-position``), one schema for every pair, so
that an edge's score splits into a score per span, summing to the edge's own.

An edge into a query, an MLP or the logits is at the position its input is read; an edge
into a key or a value at the key's position: the residual read at position s is each
of those inputs at s, so a score's sum over positions splits by the span s lies in.

A span is ``NAME=SPEC`` or ``SPEC``: token positions (``3-5``, ``0,2``: as ``--rows``
takes them) or a text (``text:7421``, or any words): the tokens covering its first
occurrence in the pair's text. Every position no span names lies in the last span,
``rest``. A pair may name its own spans (a pairs file's ``"spans"``, :func:`pair_spans`),
so that pairs of different lengths align by role (PEAP's schema): a span then is the
name of one of them, read at the pair's own positions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from attnviz import memory
from attnviz.errors import UsageError
from attnviz.selection import text_of, token_positions

REST = "rest"  # the span of every position no other names
_NAME = r"[A-Za-z_][\w-]*"
_NAMED = re.compile(rf"^({_NAME})=(.+)$", re.DOTALL)
OwnSpans = tuple[tuple[str, str], ...]  # a pair's own spans: (name, where), as --spans reads


@dataclass(frozen=True)
class Spans:
    """A pair's positions cut into spans: ``names`` (K), and each position's span (T)."""

    names: tuple[str, ...]
    of: tuple[int, ...]

    def stretches(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(span, first, end): each run of positions of one span in [start, stop)."""
        first = start
        for position in range(start + 1, stop + 1):
            if position == stop or self.of[position] != self.of[first]:
                yield self.of[first], first, position
                first = position


def checked_spans(specs: Sequence[str], by_position: bool) -> tuple[str, ...]:
    """The spans asked, each checked for its form (its positions are found in each pair):
    none with ``by_position``; no two of one name; none named ``rest``."""
    if by_position and specs:
        raise UsageError(
            "--by-position makes every position its own span: give it or --spans, not both"
        )
    names = [named(spec)[0] for spec in specs]
    for name in names:
        if name == REST:
            raise UsageError(
                f"--spans names {REST!r} itself: it holds every position no span names"
            )
        if names.count(name) > 1:
            raise UsageError(f"--spans names {name!r} twice: give each span once")
    return tuple(specs)


def span_names(specs: Sequence[str]) -> tuple[str, ...]:
    """The names of the spans ``specs`` ask, then ``rest``, as the scores name them."""
    return (*(named(spec)[0] for spec in specs), REST)


def named(spec: str) -> tuple[str, str]:
    """A span's name and what finds its positions: ``needle=text:7421`` → (needle,
    text:7421); a span without a name is named by its text, or by its positions."""
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(f"--spans takes positions or a text, not {spec!r}")
    match = _NAMED.match(spec)
    if match:
        return match.group(1), match.group(2)
    text = text_of(spec)
    return (spec if text is None else text), spec


def pair_spans(value: object) -> OwnSpans:
    """A pair's own spans as a pairs file gives them, ``{"name": [start, end)}`` in tokens
    (as ``--spans start-end`` counts them, ``end`` left out) or ``{"name": "text that
    marks it"}``: each as ``--spans`` would read it, checked for its form."""
    if not isinstance(value, Mapping) or not value:
        raise UsageError('"spans" is an object of {"name": [start, end)} or {"name": "text"}')
    found = []
    for name, where in value.items():
        if not re.fullmatch(_NAME, name) or name == REST:
            raise UsageError(
                f'"spans" names {name!r}: a span\'s name is a word (not {REST!r}, which holds '
                "every position no span names)"
            )
        found.append((name, _where(name, where)))
    return tuple(found)


def _where(name: str, where: object) -> str:
    """A pair's own span as ``--spans`` reads it: ``3-5`` for [3, 6), ``text:…``."""
    if isinstance(where, str) and where.strip():
        return f"text:{where}"
    bounds = where if isinstance(where, list) and len(where) == 2 else None
    if bounds is None or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        raise UsageError(f'"spans" {name!r} is [start, end) in tokens or a text, not {where!r}')
    start, end = bounds
    if not 0 <= start < end:
        raise UsageError(f'"spans" {name!r} is [{start}, {end}): give 0 <= start < end')
    return f"{start}-{end - 1}"


def spans_of(
    specs: Sequence[str],
    by_position: bool,
    length: int,
    find: Callable[[str], list[int]],
    own: OwnSpans | None = None,
) -> Spans:
    """A pair's spans among its ``length`` tokens, ``find`` the positions covering a text
    (its side's :meth:`~attnviz.pretrained.encoding.Side.finder`): every position its own
    span, or those ``specs`` name (a name of the pair's ``own`` spans at its positions),
    then ``rest``. Spans that share a position are refused."""
    if by_position:
        return Spans(tuple(str(position) for position in range(length)), tuple(range(length)))
    rest = len(specs)
    of = [rest] * length
    names: list[str] = []
    for index, spec in enumerate(specs):
        name, where = _own(spec, own) if own is not None else named(spec)
        for position in token_positions(where, length, "--spans", "tokens", find):
            if of[position] != rest:
                raise UsageError(
                    f"--spans {names[of[position]]!r} and {name!r} share token {position}: "
                    "give spans that do not overlap"
                )
            of[position] = index
        names.append(name)
    return Spans((*names, REST), tuple(of))


def _own(spec: str, own: OwnSpans) -> tuple[str, str]:
    """A span of a pair that names its own: one of them by name, or a span in full."""
    if not re.fullmatch(_NAME, spec):
        return named(spec)
    where = dict(own).get(spec)
    if where is None:
        raise UsageError(
            f"--spans {spec!r} is none of the pair's own spans ({', '.join(dict(own))})"
        )
    return spec, where


# Bytes an (edge, span) score holds at its peak, read from the code that makes them: a
# pass's float32 sums (estimates.py) and their two float64 copies, the dataset's float64
# sum (phases.py) and mean (driver.py), the selection's float64 magnitudes
# (selections.py); 2 for each circuit measured, its mask by span and its stacked copy;
# 8 for each bootstrap resample's float64 sum.
_SCORE_BYTES = 40
_MASK_BYTES = 2
_RESAMPLE_BYTES = 8


def check_spans_fit(spans: int, cells: int, circuits: int, resamples: int) -> None:
    """Refuse, before any pass, scores split by ``spans`` spans that cannot fit in the
    memory this process may still take: ``cells`` scores each (the graph's (U, N)),
    ``circuits`` circuits' masks by span and ``resamples`` bootstrap resamples' sums."""
    per_score = _SCORE_BYTES + _MASK_BYTES * circuits + _RESAMPLE_BYTES * resamples
    needed = spans * cells * per_score
    if (free := memory.short_of(needed)) is not None:
        raise UsageError(
            f"scores split by {spans:,} spans need about {needed / 2**30:.1f} GiB ({cells:,} "
            f"scores a span, float64, {circuits} circuits' masks, {resamples} resamples) but "
            f"this process has {free}: name fewer spans (--spans, not --by-position's one a "
            "token) or give a shorter text"
        )


def one_schema(first: Spans, other: Spans) -> None:
    """A pair's spans have the first pair's names, so that their scores add up."""
    if first.names != other.names:
        raise UsageError(
            f"{len(other.of)} tokens, the first pair {len(first.of)}: --by-position adds up "
            "each position over pairs of one length; give --spans to align them by their words"
        )
