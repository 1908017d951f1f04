"""Helpers the tests share: design spaces through stock PostOrderApply, a HeronSearch set up on a
task, schedule inspection, allocations in lowered TIR."""

import math
import re

import tvm
import tvm.s_tir.transform as s_tir_transform
from tvm.s_tir import Schedule, Trace
from tvm.s_tir import meta_schedule as ms

from ms_heron import HeronSearch, HeronSpace
from ms_heron.space import default_postprocs, design_spaces
from ms_heron.workloads.evaluate import build, run_and_check


def stock_design_spaces(func, rules, target):
    """Design spaces of ``rules`` in MetaSchedule's own PostOrderApply (drop-in check)."""
    space = ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=[], mutator_probs={})
    return design_spaces(func, target, space)


def started_search(
    func,
    target,
    *,
    trials: int,
    per_round: int,
    strategy=None,
    space=None,
    cost_model=None,
    task_name: str = "task",
    rand_state: int = 0,
):
    """``strategy`` (a new HeronSearch when None) set up on the task ``func`` over the design
    spaces of ``space`` (HeronSpace's when None), as MetaSchedule's task loop sets it up, ready for
    its first round."""
    strategy = HeronSearch() if strategy is None else strategy
    context = ms.TuneContext(
        mod=func,
        target=target,
        space_generator=HeronSpace() if space is None else space,
        search_strategy=strategy,
        task_name=task_name,
        rand_state=rand_state,
    )
    strategy.pre_tuning(trials, per_round, context.generate_design_space(), None, cost_model)
    return strategy


def block_names(sch):
    root = sch.get_sblock("root")
    return [sch.get(b).name_hint for b in sch.get_child_blocks(root)]


def finished(space, func, seed=None):
    """``space``'s trace replayed on a fresh schedule of ``func`` (the PrimFunc it was generated
    from) and finished with the postprocs.

    With a ``seed`` every decision is re-sampled; without one the space's own decisions are kept.
    """
    trace = space.trace.simplified(remove_postproc=True)
    if seed is not None:
        trace = Trace(trace.insts, {})
    sch = Schedule(func, seed=seed)
    trace.apply_to_schedule(sch, remove_postproc=True)
    assert all(p.apply(sch) for p in default_postprocs())
    return sch


def check_random_samples(space, workload, target, samples=3, seed=0):
    """Re-sample every decision of ``space``'s trace, finish with the postprocs, build, compare."""
    for s in range(samples):
        sch = finished(space, workload.func, seed=seed + s + 1)
        run_and_check(build(sch.mod, target), workload, seed=s)


_LOOKUPS = {"GetSBlock", "GetChildBlocks", "GetLoops", "GetConsumers", "GetProducers"}


def schedule_steps(sch):
    """Names of the trace's instructions that change or sample something (lookups left out)."""
    return [inst.kind.name for inst in sch.trace.insts if inst.kind.name not in _LOOKUPS]


_COMPACT = tvm.transform.Sequential(
    [
        s_tir_transform.LowerInitBlock(),
        s_tir_transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir_transform.ConvertBlocksToOpaque(),
        s_tir_transform.CompactBufferAllocation(),
    ]
)


def allocations(mod, scope: str | None = None) -> dict[str, int]:
    """Buffers the compacted TIR allocates (in scopes starting with ``scope``, e.g. ``shared`` and
    ``shared.dyn``, if given): name -> elements, storage_align
    row padding included (what the constraint model's footprints must equal)."""
    out = {}
    for name, shape, rest in re.findall(
        r"(\w+) = T\.(?:sblock_alloc_buffer|alloc_buffer)\(\(([^)]*)\)([^\n]*)",
        _COMPACT(mod).script(),
    ):
        found = re.search(r'scope="([\w.]+)"', rest)
        if scope is not None and not (found.group(1) if found else "global").startswith(scope):
            continue
        dims = [int(x) for x in shape.split(",") if x.strip()]
        strides = re.search(r"strides=\(([^)]*)\)", rest)
        out[name] = dims[0] * int(strides.group(1).split(",")[0]) if strides else math.prod(dims)
    return out
