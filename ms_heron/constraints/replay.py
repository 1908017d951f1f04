"""From a solution to a schedule: trace decisions, replay on a fresh schedule, repair check.

TVM silently repairs a tile decision whose product is not the loop extent (it recomputes a
factor or re-samples); a replay is accepted only if every decision reads back unchanged.
"""

from __future__ import annotations

import re

from tvm import IRModule
from tvm.s_tir import Schedule, Trace

from .model import ConstraintModel, Values


class RepairedDecision(RuntimeError):
    """TVM changed a decision during replay: the solution was not valid for the trace."""


def decisions_of(model: ConstraintModel, values: Values) -> dict:
    return {d.inst: d.to_trace(values) for d in model.decisions}


def replay(model: ConstraintModel, trace: Trace, mod: IRModule, values: Values) -> Schedule:
    """The design space ``trace`` with ``values`` as its decisions, replayed on ``mod``."""
    wanted = decisions_of(model, values)
    decided = Trace(trace.insts, {**dict(trace.decisions), **wanted})
    sch = Schedule(mod, debug_mask="none")
    decided.apply_to_schedule(sch, remove_postproc=True)
    # The replayed trace has new Instruction objects; its sampling instructions come in the same order.
    replayed = sch.trace.decisions
    got = [replayed[inst] for inst in sch.trace.insts if inst in replayed]
    if len(got) != len(model.decisions):
        raise RepairedDecision(f"replay sampled {len(got)} decisions, the model has {len(model.decisions)}")
    for d, back in zip(model.decisions, got):
        expected = d.to_trace(values)
        back = [int(x) for x in back] if d.kind == "tile" else int(back)
        if back != expected:
            raise RepairedDecision(f"replay changed {d.kind} decision {expected} into {back}")
    return sch


_DECISION = re.compile(r", decision=.*\)$")


def _skeleton(trace: Trace) -> list[str]:
    """The trace as Python without its decisions: equal for every replay of one design space."""
    return [_DECISION.sub(")", line) for line in trace.as_python(remove_postproc=True)]


def values_from_trace(model: ConstraintModel, space_trace: Trace, trace: Trace) -> Values | None:
    """The values that turn ``space_trace`` into ``trace`` (e.g. a database record's), or None
    when ``trace`` is not a replay of this design space."""
    trace = trace.simplified(remove_postproc=True)
    if _skeleton(trace) != _skeleton(space_trace):
        return None
    decided = [trace.decisions[inst] for inst in trace.insts if inst in trace.decisions]
    if len(decided) != len(model.decisions):
        return None
    values: Values = {}
    for d, got in zip(model.decisions, decided):
        values.update(zip(d.variables, [int(x) for x in got] if d.kind == "tile" else [int(got)]))
    return values
