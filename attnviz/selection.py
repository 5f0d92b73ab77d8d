"""Parsing layer, head and row selections: ``2``, ``0,2``, ``0-2``, ``all``, ``-1``, ``last``;
and token positions, which may also be given by text (``--rows``, ``--span``); and
writing a selection of indices as pictures and tables name it (:func:`index_span`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from attnviz.errors import UsageError

Selection = str | int | Sequence[int] | None  # 2, "0,2", "0-2", [0, 2], "all" or None (all)

_RANGE = re.compile(r"^(-?\d+)-(-?\d+)$")


class OutOfRange(UsageError):
    """An index past the end of what it selects from."""


def resolve(
    spec: str | int | Sequence[int] | None, count: int, what: str, of: str | None = None
) -> list[int]:
    """Turn a selection of ``what`` ("layer", "head") into sorted-as-given, unique indices.

    Negative indices count from the end, as in Python. ``None`` and ``"all"``
    select everything. Indices outside ``range(count)`` are a usage error that
    states the valid range, counted in ``of`` ("key tokens"; ``what`` by default).
    """
    if spec is None:
        return list(range(count))
    if isinstance(spec, int):
        parts: list[int | str] = [spec]
    elif isinstance(spec, str):
        parts = [part.strip() for part in spec.split(",")]
    else:
        parts = list(spec)
    indices: list[int] = []
    for part in parts:
        for index in _expand(part, count, what, of or what):
            if index not in indices:
                indices.append(index)
    return indices


def _expand(part: int | str, count: int, what: str, of: str) -> list[int]:
    if isinstance(part, int):
        return [_check(part, count, what, of)]
    if part.lower() == "all":
        return list(range(count))
    if part.lower() == "last":
        return [count - 1]
    if re.fullmatch(r"-?\d+", part):
        return [_check(int(part), count, what, of)]
    match = _RANGE.match(part)
    if not match:
        raise _not_a_selection(part, what)
    first, last = (_check(int(bound), count, what, of) for bound in match.groups())
    if first > last:
        raise UsageError(f"{what} range {part!r} runs backwards")
    return list(range(first, last + 1))


def _not_a_selection(part: str, what: str) -> UsageError:
    return UsageError(
        f"{what} selection {part!r} is not an index, a list (0,2), a range (0-2), 'last' or 'all'"
    )


def _check(index: int, count: int, what: str, of: str) -> int:
    if not -count <= index < count:
        noun = of.removesuffix("s")
        counted = noun if count == 1 else f"{noun}s"
        raise OutOfRange(
            f"{what} {index} is out of range: there {'is' if count == 1 else 'are'} {count} "
            f"{counted} (0 to {count - 1}, or -{count} to -1 from the end)"
        )
    return index % count


def resolve_one(spec: str | int | Sequence[int] | None, count: int, what: str) -> int:
    """A selection that must name exactly one layer or head (explain walks through one)."""
    chosen = resolve(spec, count, what)
    if len(chosen) != 1:
        raise UsageError(f"explain walks through one {what}: give a single --{what} index")
    return chosen[0]


def check_syntax(spec: str | int | Sequence[int] | None, what: str) -> None:
    """Refuse a selection that is not written like one, before the model that would
    tell its range is loaded."""
    if isinstance(spec, str):
        for part in (part.strip() for part in spec.split(",")):
            if not _is_part(part):
                raise _not_a_selection(part, what)


def _is_part(part: str) -> bool:
    return part.lower() in ("all", "last") or bool(
        re.fullmatch(r"-?\d+", part) or _RANGE.match(part)
    )


TEXT_PREFIX = "text:"  # what makes a selection of tokens text, even when it reads like indices


def text_of(spec: Selection) -> str | None:
    """The text a selection of token positions names (``--span "the key"``): a string
    that is not written like indices, or anything after ``text:``; None for indices."""
    if not isinstance(spec, str):
        return None
    if spec.startswith(TEXT_PREFIX):
        return spec[len(TEXT_PREFIX) :]
    if all(_is_part(part.strip()) for part in spec.split(",")):
        return None
    return spec


def token_positions(
    spec: Selection, count: int, what: str, of: str, find: Callable[[str], list[int]]
) -> list[int]:
    """Ascending token positions among ``count`` (``of``: "query tokens"): of indices, or,
    of text, the tokens ``find`` says cover its first occurrence."""
    text = text_of(spec)
    if text is not None:
        return find(text)
    try:
        return sorted(resolve(spec, count, what, of))
    except OutOfRange as error:
        if not isinstance(spec, str):
            raise
        # A number may have been meant as text: a year, a code, a needle's digits.
        raise OutOfRange(f"{error}; for the text {spec!r}, write {TEXT_PREFIX}{spec}") from None


def covering(
    text: str, wanted: str, spans: Sequence[tuple[int, int] | None], what: str
) -> list[int]:
    """The tokens that cover the first occurrence of ``wanted`` in ``text``: token ``i``
    spans the characters ``spans[i]`` of ``text`` (None: a token not of the text)."""
    start = text.find(wanted) if wanted else -1
    end = start + len(wanted)
    found = [
        position
        for position, span in enumerate(spans)
        if span is not None and span[0] < end and span[1] > start and span[1] > span[0]
    ]
    if start < 0 or not found:
        shown = wanted if len(wanted) <= 40 else wanted[:39] + "…"
        where = "" if start < 0 else " (it lies in the part that was cut)"
        raise UsageError(f"{what} {shown!r} is not in the text{where}")
    return found


def resolve_held(
    spec: str | int | Sequence[int] | None, held: Sequence[int], what: str
) -> list[int]:
    """A selection among the layers or heads that saved maps hold, by model index;
    negative indices count from the last one held."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "all"):
        return list(held)
    count = max(held) + 1
    chosen = resolve(spec, count, what)
    missing = [index for index in chosen if index not in held]
    if missing:
        raise UsageError(
            f"{what} {missing[0]} is not in these saved maps: they hold {what}s "
            f"{', '.join(map(str, held))}"
        )
    return chosen


def check_pool(pool: object) -> None:
    """A number of bins to pool maps into: a whole number of at least 2 (None: no pooling)."""
    if pool is not None and (isinstance(pool, bool) or not isinstance(pool, int) or pool < 2):
        raise UsageError(f"--pool takes a number of bins of at least 2, not {pool!r}")


def index_span(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 3]`` -> ``0–3``; ``[0, 2]`` -> ``0,2``."""
    if len(indices) > 2 and list(indices) == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}–{indices[-1]}"
    return ",".join(map(str, indices))


def checked_positions(value: object, option: str, what: str) -> Selection:
    """Token positions as a request keeps them: a selection, or a text to look for."""
    text = text_of(value) if isinstance(value, str) else None
    if text is None or not isinstance(value, str):
        return checked_selection(value, what)
    if not text.strip():
        raise UsageError(f"--{option} names tokens by position or by a text, not an empty one")
    return value


def checked_selection(value: object, what: str) -> Selection:
    """A selection as a request keeps it: a list becomes a tuple (a request is frozen);
    anything that is not written like a selection is a usage error."""
    if value is None or isinstance(value, str):
        check_syntax(value, what)
        return value
    if isinstance(value, bool | float):
        raise UsageError(f"{what}s are chosen by index, a list, a range or 'all', not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        if not value:
            raise UsageError(f"the {what} list is empty: give at least one index, or 'all'")
        if not all(isinstance(index, int) and not isinstance(index, bool) for index in value):
            raise UsageError(f"a {what} list holds integer indexes, not {list(value)!r}")
        return tuple(value)
    raise UsageError(
        f"{what}s are chosen by index, a list, a range or 'all', not {type(value).__name__}"
    )
