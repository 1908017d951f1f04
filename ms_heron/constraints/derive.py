"""Derive a design space's :class:`ConstraintModel` from its trace and the Target alone.

The walk visits the trace's instructions in order and hands each to its handler in
:data:`INSTRUCTIONS` (``Annotate`` by its key, in :data:`ANNOTATIONS`): :mod:`.walk` for the
sampling and loop instructions, :mod:`.cpu` (parallel jobs, vector lanes), :mod:`.gpu` (thread
bindings, cooperative fetches) and :mod:`.geometry` (cache stages' footprints). A rule whose
instructions mean something new for the constraints adds its handler to the table. Constraints that
need the whole walk (BLIS's micro-kernel model, L2 capacity, GPU limits) are added at the end.
"""

from __future__ import annotations

from collections.abc import Callable

from tvm.s_tir import Schedule
from tvm.target import Target

from ..schedule.annotations import is_metaschedule_space
from . import cpu, geometry, gpu, walk
from .model import ConstraintModel
from .walk import ConstraintOptions, Walk

Handler = Callable[[Walk, object], None]

#: Instruction kind -> what it adds to the walk and the model.
INSTRUCTIONS: dict[str, Handler] = {
    **walk.HANDLERS,
    "Parallel": cpu.on_parallel,
    "Vectorize": cpu.on_vectorize,
    "Bind": gpu.on_bind,
    "ComputeAt": geometry.on_compute_at,
    "ReverseComputeAt": geometry.on_compute_at,
}
#: ``Annotate`` instructions by annotation key.
ANNOTATIONS: dict[str, Handler] = {
    gpu.WARP_EXECUTION: gpu.on_warp_execution,
    gpu.COOPERATIVE_FETCH: gpu.on_cooperative_fetch,
}


def derive(
    space: Schedule, target: Target, options: ConstraintOptions = ConstraintOptions()
) -> ConstraintModel:
    """The constraint model of the design space ``space`` (a Schedule whose trace samples).

    MetaSchedule's own spaces (added by HeronSpace) get their validity constraints only.
    """
    trace = space.trace.simplified(remove_postproc=True)
    if is_metaschedule_space(trace):
        options = options.validity_only()
    state = Walk(space=space, trace=trace, target=target, options=options)
    for inst in trace.insts:
        kind = inst.kind.name
        handler = (
            ANNOTATIONS.get(str(inst.attrs[0])) if kind == "Annotate" else INSTRUCTIONS.get(kind)
        )
        if handler is not None:
            handler(state, inst)
    cpu.add_cpu_constraints(state)
    gpu.add_gpu_constraints(state)
    return state.model
