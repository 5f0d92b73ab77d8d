"""Parsing layer, head and row selections: ``2``, ``0,2``, ``0-2``, ``all``, ``-1``, ``last``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from attnviz.errors import UsageError

Selection = str | int | Sequence[int] | None  # 2, "0,2", "0-2", [0, 2], "all" or None (all)

_RANGE = re.compile(r"^(-?\d+)-(-?\d+)$")


def resolve(spec: str | int | Sequence[int] | None, count: int, what: str) -> list[int]:
    """Turn a selection of ``what`` ("layer", "head") into sorted-as-given, unique indices.

    Negative indices count from the end, as in Python. ``None`` and ``"all"``
    select everything. Indices outside ``range(count)`` are a usage error that
    states the valid range.
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
        for index in _expand(part, count, what):
            if index not in indices:
                indices.append(index)
    return indices


def _expand(part: int | str, count: int, what: str) -> list[int]:
    if isinstance(part, int):
        return [_check(part, count, what)]
    if part.lower() == "all":
        return list(range(count))
    if part.lower() == "last":
        return [count - 1]
    if re.fullmatch(r"-?\d+", part):
        return [_check(int(part), count, what)]
    match = _RANGE.match(part)
    if not match:
        raise _not_a_selection(part, what)
    first, last = (_check(int(bound), count, what) for bound in match.groups())
    if first > last:
        raise UsageError(f"{what} range {part!r} runs backwards")
    return list(range(first, last + 1))


def _not_a_selection(part: str, what: str) -> UsageError:
    return UsageError(
        f"{what} selection {part!r} is not an index, a list (0,2), a range (0-2), 'last' or 'all'"
    )


def _check(index: int, count: int, what: str) -> int:
    if not -count <= index < count:
        plural = what if count == 1 else f"{what}s"
        raise UsageError(
            f"{what} {index} is out of range: there {'is' if count == 1 else 'are'} {count} "
            f"{plural} (0 to {count - 1}, or -{count} to -1 from the end)"
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
            if not (
                part.lower() in ("all", "last")
                or re.fullmatch(r"-?\d+", part)
                or _RANGE.match(part)
            ):
                raise _not_a_selection(part, what)


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
