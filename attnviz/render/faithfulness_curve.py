"""A circuit's faithfulness drawn beside its graph: against the edges kept at each size
measured, or MIB's curve over its ten fractions with the two areas it reports shaded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attnviz.choices import INTERVENTIONS, Level, Select

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Circuit


def faithfulness_curve(axes: Any, circuit: Circuit, small: int) -> None:
    """Faithfulness against the circuit's size: the curve's points and the circuit's; or
    MIB's curve, against its fractions, with its two areas shaded."""
    if circuit.areas is not None:
        _mib_curve(axes, circuit, small)
        return
    measured = [(point.kept, point.faithfulness) for point in circuit.curve]
    points = sorted(
        (kept, value)
        for kept, value in [*measured, (circuit.kept, circuit.faithfulness)]
        if value is not None
    )
    if points:
        sizes, values = (np.array(part) for part in zip(*points, strict=True))
        axes.plot(sizes, values, marker="o", color="#333333", lw=1)
        if circuit.faithfulness is not None:
            axes.scatter([circuit.kept], [circuit.faithfulness], s=50, c="#c0392b", zorder=3)
        if sizes.max() > 10 * max(1, sizes[sizes > 0].min(initial=1)):
            axes.set_xscale("symlog", linthresh=1)
    axes.axhline(1.0, color="#999999", lw=0.6, ls="--")
    axes.axhline(0.0, color="#999999", lw=0.6, ls=":")
    axes.set_xlabel(f"{units_of(circuit)} kept", fontsize=small)
    axes.set_ylabel("faithfulness", fontsize=small)
    axes.tick_params(labelsize=small)
    intervened = INTERVENTIONS[circuit.ablation]
    emptied = f"the {intervened.emptied}" if intervened.corrupt else intervened.emptied
    axes.set_title(f"faithfulness (1: the clean run, 0: {emptied})", fontsize=small)


def units_of(circuit: Circuit) -> str:
    """What a circuit's sizes count: nodes, (edge, span) pairs or edges."""
    if circuit.level is Level.NODE:
        return "nodes"
    return "(edge, span) pairs" if circuit.scored.by_spans else "edges"


def _mib_curve(axes: Any, circuit: Circuit, small: int) -> None:
    """MIB's points on the fractions' linear scale (the one its areas are taken on): CPR
    the area under the curve it is read from (the signed circuits', where measured), CMD
    the area between its own curve and 1."""
    areas = circuit.areas
    assert areas is not None

    def curve_of(select: Select) -> tuple[np.ndarray, np.ndarray]:
        points = [point for point in circuit.curve if point.select is select]
        values = [point.faithfulness for point in points]
        return np.array([point.fraction for point in points]), np.array(values, dtype=np.float64)

    under, between = curve_of(areas.cpr_select), curve_of(areas.cmd_select)
    two = areas.cpr_select is not areas.cmd_select  # each curve named where both are drawn
    cpr = f"CPR {areas.cpr:z.3f}" + (f" ({areas.cpr_select})" if two else "")
    cmd = f"CMD {areas.cmd:z.3f}" + (f" ({areas.cmd_select})" if two else "")
    axes.fill_between(*under, 0, color="#3b6fb6", alpha=0.25, lw=0, label=cpr)
    axes.fill_between(*between, 1, color="#c0392b", alpha=0.18, lw=0, label=cmd)
    axes.plot(*between, marker="o", color="#333333", lw=1, ms=3)
    if two:
        axes.plot(*under, marker="s", color="#3b6fb6", lw=1, ms=3, ls="--")
    axes.axhline(1.0, color="#999999", lw=0.6, ls="--")
    axes.axhline(0.0, color="#999999", lw=0.6, ls=":")
    axes.set_xlabel(f"fraction of the {units_of(circuit)} (MIB's ten)", fontsize=small)
    axes.set_ylabel("faithfulness", fontsize=small)
    axes.tick_params(labelsize=small)
    axes.legend(fontsize=small, loc="lower right", frameon=False)
    axes.set_title("MIB's integrated faithfulness", fontsize=small)
