"""Transfer between a model's tasks: a tuned task's best programs seed the first round of the tasks
with the same design-space structure.

A network's convolutions and matmuls share their structure across stages; what blocked one well
(register tile, vector axis, unroll depth, where the caches sit) is a strong first guess for the
next. Decisions are carried over in a shape-free form: a tiling's inner factors (the outer one
absorbs the new extent) and the chosen candidate of a categorical or compute-location decision.
CP-SAT completes them under the new task's constraints, so a projection is as valid as any sample.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from ..constraints import ConstraintModel, Infeasible, Solver

#: A design space's structure: its instructions' kinds, and each decision's kind and arity.
Signature = tuple
#: One program's decisions in shape-free form, one entry per decision of its model.
Donation = tuple


def signature(model: ConstraintModel, trace) -> Signature:
    """Two spaces with one signature came from the same rules on the same kind of block."""
    return (
        tuple(inst.kind.name for inst in trace.insts),
        tuple((d.kind, len(d.variables)) for d in model.decisions),
    )


def donation(model: ConstraintModel, values: dict) -> Donation:
    """``values`` (a solution of ``model``) as tile factors and chosen candidates."""
    return tuple(
        tuple(values[v] for v in d.variables)
        if d.kind == "tile"
        else d.candidates[values[d.variables[0]]]
        for d in model.decisions
    )


def project(solver: Solver, donated: Donation) -> dict | None:
    """A solution of ``solver``'s model that keeps what fits of ``donated``: every tiling's inner
    factors that divide the new extent, every chosen candidate the new decision also offers. When
    those together conflict with the model, they only guide CP-SAT (hints). None if nothing
    solves."""
    fixed, hints = {}, {}
    for decision, value in zip(solver.model.decisions, donated):
        if decision.kind == "tile":
            hints.update(zip(decision.variables, value))
            if (
                len(value) == len(decision.variables)
                and decision.extent % math.prod(value[1:]) == 0
            ):
                fixed.update(zip(decision.variables[1:], value[1:]))
        elif value in decision.candidates:
            fixed[decision.variables[0]] = decision.candidates.index(value)
    for keep in (fixed, {}):
        try:
            return solver.complete(keep, hints={**hints, **fixed})
        except Infeasible:
            continue
    return None


class Donors:
    """The best program of every tuned task, per design-space signature; shared by a HeronSearch and
    its clones (one per task). Newest donors first: a model's tasks are tuned largest first, so the
    task tuned last before this one is the nearest in size."""

    def __init__(self):
        self._best: dict[Signature, OrderedDict[str, tuple[float, Donation]]] = {}

    def donate(self, sig: Signature, task: str, seconds: float, donated: Donation) -> None:
        """Keep ``donated`` as ``task``'s program for spaces of ``sig`` if it is its fastest yet."""
        held = self._best.setdefault(sig, OrderedDict())
        if task not in held or seconds < held[task][0]:
            held[task] = (seconds, donated)
        held.move_to_end(task)

    def for_task(self, sig: Signature, task: str, limit: int) -> list[Donation]:
        """Up to ``limit`` other tasks' best programs for a space of ``sig``, newest donor first."""
        held = self._best.get(sig, {})
        return [donated for name, (_, donated) in reversed(held.items()) if name != task][:limit]
