"""Transfer between tasks: a tuned task's best programs seed the first round of the tasks with the
same design-space structure, in this run or (from a records store) in a later one.

A network's convolutions and matmuls share their structure across stages; what blocked one well
(register tile, vector axis, unroll depth, where the caches sit) is a strong first guess for the
next. Decisions are carried over in a shape-free form: a tiling's inner factors (the outer one
absorbs the new extent) and the chosen candidate of a categorical or compute-location decision.
CP-SAT completes them under the new task's constraints, so a projection is as valid as any sample.
A stored record's trace carries the same decisions, so another network's best programs (ResNet-50's
convolutions for ResNet-101's) project the same way.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from tvm.s_tir import Trace
from tvm.s_tir.meta_schedule.database import TuningRecord

from ..constraints import ConstraintModel, Infeasible, Solver
from ..records import record_seconds

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


def stored_donation(trace: Trace) -> tuple[Signature, Donation] | None:
    """A record's program in the form of :func:`signature` and :func:`donation`, read from its trace
    alone (the design space it replays is not at hand); None when the trace holds a decision kind
    no constraint model takes."""
    trace = trace.simplified(remove_postproc=True)
    kinds, donated = [], []
    for inst in trace.insts:
        if inst not in trace.decisions:
            continue
        decided, kind = trace.decisions[inst], inst.kind.name
        if kind == "SamplePerfectTile":
            donated.append(tuple(int(x) for x in decided))
            kinds.append(("tile", len(donated[-1])))
        elif kind == "SampleCategorical":  # the trace holds an index into the candidates
            donated.append(int(inst.attrs[0][int(decided)]))
            kinds.append(("categorical", 1))
        elif kind == "SampleComputeLocation":  # the trace holds the position itself
            donated.append(int(decided))
            kinds.append(("location", 1))
        else:
            return None
    return (tuple(inst.kind.name for inst in trace.insts), tuple(kinds)), tuple(donated)


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
    its clones (one per task), and given the stored records of other runs (:meth:`take_stored`).
    A task takes the donors nearest to its own extents first, the newest of equally near ones."""

    def __init__(self):
        self._best: dict[Signature, OrderedDict[str, tuple[float, Donation]]] = {}

    def donate(self, sig: Signature, task: str, seconds: float, donated: Donation) -> None:
        """Keep ``donated`` as ``task``'s program for spaces of ``sig`` if it is its fastest yet."""
        held = self._best.setdefault(sig, OrderedDict())
        if task not in held or seconds < held[task][0]:
            held[task] = (seconds, donated)
        held.move_to_end(task)

    def take_stored(self, records: Iterable[TuningRecord]) -> None:
        """Donate each record as its workload's program (another run's: one record per workload,
        its fastest); a record no constraint model's form fits is left out."""
        for record in records:
            stored = stored_donation(record.trace)
            if stored is not None:
                sig, donated = stored
                key = f"stored {record.workload.as_json()[0]}"
                self.donate(sig, key, record_seconds(record.run_secs), donated)

    def for_task(
        self, sig: Signature, task: str, limit: int, extents: Sequence[int] = ()
    ) -> list[Donation]:
        """Up to ``limit`` other tasks' best programs for a space of ``sig``: nearest first when
        ``extents`` gives the space's tile extents (0 for a decision that is no tiling), by the
        summed log ratio of the extents; newest donor first among equally near ones."""
        held = self._best.get(sig, {})
        newest_first = [donated for name, (_, donated) in reversed(held.items()) if name != task]
        if extents:
            newest_first.sort(key=lambda donated: _distance(donated, extents))
        return newest_first[:limit]


def _distance(donated: Donation, extents: Sequence[int]) -> float:
    """How far a donor's tile extents are from ``extents``: summed absolute log ratios."""
    return sum(
        abs(math.log(math.prod(value) / extent))
        for value, extent in zip(donated, extents)
        if extent
    )
