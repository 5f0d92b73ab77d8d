"""MIB's integrated faithfulness (Mueller et al. 2025, the circuit localisation track, as
hannamw/MIB-circuit-track's ``evaluate_area_under_curve`` computes it): a method's
circuits at ten fractions of the graph's edges (of its nodes, at the node level), each
the top ``int(fraction × count)`` chosen and pruned, measured; **CPR** is the area under
their faithfulness over the fractions, **CMD** the area between it and 1, both by
trapezoids on the fractions' linear scale (0.001 to 1: at most 0.999 each).

MIB reads the two areas from two curves (its ``print_results.py``, commit b759df3): CPR
from the circuits of largest signed score (``absolute=False``: ``--select signed``), CMD
from those of largest |score| (``absolute=True``), each from the other where only one was
measured. ``--curve mib`` measures both where the circuit's selection is not ``signed``
itself, and :func:`areas_of` reads each area from its curve."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import NamedTuple

from attnviz.choices import Select

MIB = "mib"  # --curve mib: the circuits at MIB's fractions
MIB_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
# The circuit a run with --curve mib reports (and optimize trains for): the fraction MIB's
# tables give faithfulness at.
MIB_CIRCUIT = 0.01


class Areas(NamedTuple):
    """MIB's two areas over its fractions: CPR (higher is better), CMD (lower is), and
    the selection whose circuits each was read from."""

    cpr: float
    cmd: float
    cpr_select: Select
    cmd_select: Select


def mib_sizes(count: int) -> list[tuple[int, float]]:
    """Each of MIB's fractions of ``count`` edges (or nodes): (its size, the fraction),
    rounded down as MIB's evaluation rounds it."""
    return [(int(fraction * count), fraction) for fraction in MIB_FRACTIONS]


def areas_of(points: Sequence[tuple[float, float | None, Select]], own: Select) -> Areas | None:
    """CPR and CMD of a curve of (fraction, faithfulness, selection) points, where the
    circuit's own selection, ``own``, has MIB's ten fractions, in order, each with a
    faithfulness (and ``signed``, where it has points, too): CPR from the ``signed``
    points where there are any, else from ``own``'s, CMD from ``own``'s; else None."""
    cpr_select = Select.SIGNED if any(select is Select.SIGNED for *_, select in points) else own
    under = _areas([(x, f) for x, f, select in points if select is cpr_select])
    between = _areas([(x, f) for x, f, select in points if select is own])
    if under is None or between is None:
        return None
    return Areas(under[0], between[1], cpr_select, own)


def _areas(points: list[tuple[float, float | None]]) -> tuple[float, float] | None:
    """(the area under, the area between it and 1) of one curve at MIB's fractions."""
    if tuple(fraction for fraction, _ in points) != MIB_FRACTIONS:
        return None
    values = [value for _, value in points]
    if any(value is None for value in values):
        return None
    cpr = cmd = 0.0
    for (x1, f1), (x2, f2) in pairwise(points):
        assert f1 is not None and f2 is not None  # checked above
        cpr += (x2 - x1) * (f1 + f2) / 2
        cmd += (x2 - x1) * (abs(1 - f1) + abs(1 - f2)) / 2
    return cpr + 0.0, cmd + 0.0
