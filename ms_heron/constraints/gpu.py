"""GPU constraints: threads per block, shared memory per block, and whole vectors in cooperative
fetches.

The limits come from the Target (:class:`~ms_heron.hardware.targets.GpuLimits`); the walk reads
``Bind``, the ``warp_execution`` annotation of MetaSchedule's TensorCore rule (a warp runs each
thread-y iteration) and the cooperative-fetch vector widths.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ..hardware.targets import GpuLimits, is_cuda
from .geometry import UNPADDED, add_summed_bytes
from .model import Constraint, ConstraintModel
from .walk import Kernel, Loop, Walk

#: Block annotation MetaSchedule's TensorCore rule sets: a warp executes each thread-y iteration.
WARP_EXECUTION = "warp_execution"
#: Block annotation of a shared-memory stage: its loads are spread over the block's threads,
#: vectorized.
COOPERATIVE_FETCH = "meta_schedule.cooperative_fetch"


def on_bind(walk: Walk, inst) -> None:
    _bind(walk.loops.get(inst.inputs[0]), str(inst.attrs[0]), walk.kernels)


def on_warp_execution(walk: Walk, inst) -> None:
    walk.kernels.setdefault(walk.block_name(inst.inputs[0]), Kernel()).warp_lanes = True


def on_cooperative_fetch(walk: Walk, inst) -> None:
    if inst.inputs[1] in walk.sampled:
        walk.fetch_vectors[walk.block_name(inst.inputs[0])] = walk.sampled[inst.inputs[1]]


def add_gpu_constraints(walk: Walk) -> None:
    if not is_cuda(walk.target):
        return
    limits = GpuLimits.of(walk.target)
    _add_threads(walk.model, walk.kernels, limits)
    _add_shared_memory(walk.model, limits)
    _add_fetch_vectors(walk.model, walk.fetch_vectors)


def _bind(loop: Loop | None, axis: str, kernels: dict) -> None:
    if loop is None or loop.block is None:
        return
    for part in (loop, *loop.parts):
        part.thread = axis
    if (
        axis.startswith("threadIdx")
        and loop.factors
        and axis not in kernels.setdefault(loop.block, Kernel()).threads
    ):
        kernels[loop.block].threads[axis] = loop.factors


def _add_threads(model: ConstraintModel, kernels: dict, limits: GpuLimits) -> None:
    """Threads per block (thread axes x warp lanes) within the target's
    ``max_threads_per_block``."""
    for block, kernel in kernels.items():
        factors = [f for fs in kernel.threads.values() for f in fs]
        if not factors:
            continue
        lanes = limits.warp_size if kernel.warp_lanes else 1
        name = f"threads[{block}]"
        threads = model.product(name, [*factors, lanes])
        cap = limits.max_threads_per_block
        model.cp.Add(threads <= cap)
        model.add(
            Constraint(
                name=f"{name}: {' x '.join(kernel.threads)}"
                f"{f' x {lanes} lanes' if lanes > 1 else ''} <= {cap}",
                kind="threads",
                holds=lambda v, n=name, k=cap: v[n] <= k,
            )
        )


def _add_shared_memory(model: ConstraintModel, limits: GpuLimits) -> None:
    """All shared buffers of one kernel, padded, in bytes, summed within
    ``max_shared_memory_per_block``."""
    shared = [fp for fp in model.footprints if fp.scope.startswith("shared")]
    add_summed_bytes(
        model,
        shared,
        limits.max_shared_memory_per_block,
        "shared memory[{block}]: {buffers} <= {limit} B",
        performance=False,
    )


def _add_fetch_vectors(model: ConstraintModel, fetch_vectors: dict) -> None:
    """A cooperative fetch's vector width divides the elements it copies (Heron: no ragged
    vectors)."""
    for fp in model.footprints:
        choice = fetch_vectors.get(fp.stage)
        if choice is None:
            continue
        decision = next(d for d in model.decisions if d.variables == (choice,))
        widths = decision.candidates
        width = model.cp.NewIntVarFromDomain(
            cp_model.Domain.FromValues(sorted(set(widths))), f"{choice}.width"
        )
        model.cp.AddElement(model.vars[choice], list(widths), width)
        elements = (
            f"{fp.variable}{UNPADDED}" if f"{fp.variable}{UNPADDED}" in model.vars else fp.variable
        )
        # bounded through ``elements``
        count = model.cp.NewIntVar(1, 1 << 40, f"{fp.variable}.vectors")
        model.cp.AddMultiplicationEquality(model.vars[elements], [width, count])
        model.add(
            Constraint(
                name=f"vector load of {fp.buffer}: width divides its {elements}",
                kind="vector",
                holds=lambda v, c=choice, w=widths, n=elements: v[n] % w[v[c]] == 0,
            )
        )
