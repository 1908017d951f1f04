"""From a solution to a schedule: trace decisions, replay on a fresh schedule, repair check.

TVM silently repairs a tile decision whose product is not the loop extent (it recomputes a
factor or re-samples); a replay is accepted only if every tile and categorical decision reads back
unchanged. Compute locations are the exception: the model's candidates are a superset of TVM's
(see ``derive``), and TVM maps a rejected position to the next valid one further out, so the
replayed schedule's location decisions are the program's true values (:func:`decided_values`).
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


def decided_values(model: ConstraintModel, trace: Trace) -> Values | None:
    """The model's values of a replay of its design space (``trace``'s decisions, in order), or None
    when the trace's sampling instructions do not match the model's decisions."""
    decided = [trace.decisions[inst] for inst in trace.insts if inst in trace.decisions]
    if len(decided) != len(model.decisions):
        return None
    values: Values = {}
    for d, got in zip(model.decisions, decided):
        part = d.from_trace(got)
        if part is None:
            return None
        values.update(part)
    return values


def replay(model: ConstraintModel, trace: Trace, mod: IRModule, values: Values) -> Schedule:
    """The design space ``trace`` with ``values`` as its decisions, replayed on ``mod``."""
    decided = Trace(trace.insts, {**dict(trace.decisions), **decisions_of(model, values)})
    sch = Schedule(mod, debug_mask="none")
    decided.apply_to_schedule(sch, remove_postproc=True)
    back = decided_values(model, sch.trace)
    if back is None:
        raise RepairedDecision(
            "the replay's sampling instructions do not match the model's decisions"
        )
    for d in model.decisions:
        if d.kind != "location" and d.to_trace(back) != d.to_trace(values):
            raise RepairedDecision(
                f"replay changed {d.kind} decision {d.to_trace(values)} into {d.to_trace(back)}"
            )
    return sch


def native_sample(model: ConstraintModel, trace: Trace, mod: IRModule, seed: int) -> Values | None:
    """Decisions drawn by TVM's own samplers (the distribution MetaSchedule's search starts from:
    tilings by prime factor, categorical probabilities, valid compute locations), as model values;
    None when they fall outside the model."""
    sch = Schedule(mod, seed=seed, debug_mask="none")
    Trace(trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
    return decided_values(model, sch.trace)


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
    return decided_values(model, trace)
