"""Kernels for the tasks a model run has not measured: what HeronSearch would measure first, not
TVM's loops.

A model compiles whenever its user asks: after a budget too short for every task, a run stopped with
CTRL-C, or a bench's race point at one minute. A task without a valid record used to run TVM's
untuned loop nest, one thread and no vectors: ResNet-50 took 6.1 s one minute into a run that ends
at 52 ms. The program HeronSearch measures first for a task costs a second or two to make: the best
program of a tuned task of the same design-space structure, projected onto this one by CP-SAT
(:mod:`ms_heron.search.transfer`), or else the blocking BLIS's analytical model picks in its first
space (:meth:`~ms_heron.constraints.solver.Solver.analytical`); valid by the constraints either
way. It is built once here, as candidates are, so a program that does not build, or builds for
minutes, leaves its task untuned instead of failing or hanging the model's compilation.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Literal

import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.target import Target

from ..records import fastest_per_workload
from ..relax.tasks import Task, untuned_tasks
from ..search import HeronSearch
from ..space import HeronSpace
from .builder import local_builder, remove_artifact

logger = logging.getLogger(__name__)

#: What a task without a valid record runs in a compiled model: ``"analytical"``, the program
#: HeronSearch would measure first, chosen without measuring (:func:`first_schedule`); ``"naive"``,
#: TVM's untuned kernel (MetaSchedule's behaviour, and the reference a tuned model is checked
#: against).
Untuned = Literal["analytical", "naive"]


def first_schedule(task: Task, target: Target, search: HeronSearch) -> Schedule | None:
    """The first program ``search`` measures for ``task`` (a donor's best projected onto it, else
    its analytical choice), replayed and post-processed; None when the task has none."""
    context = ms.TuneContext(
        mod=task.mod,
        target=target,
        space_generator=HeronSpace(),
        search_strategy=search,
        task_name=task.name,
        num_threads="physical",
    )
    try:
        context.pre_tuning(1, 1, context.generate_design_space(), None, None)
        candidates = context.generate_measure_candidates() or []
        context.post_tuning()
    # one task's failure (no solvable space) leaves it untuned, never the model
    except Exception as err:  # pylint: disable=broad-exception-caught
        logger.warning("task %s keeps its untuned kernel: %s", task.name, err)
        return None
    return candidates[0].sch if candidates else None


def built(schedules: dict[str, Schedule], target: Target) -> dict[str, Schedule]:
    """Those of ``schedules`` that build, built as candidates are (worker processes, the tuning
    timeout): a program LLVM takes minutes over (a long loop unrolled, say) must not hang the
    model's compilation, as it does not hang tuning."""
    names = list(schedules)
    results = local_builder().build([BuilderInput(schedules[n].mod, target) for n in names])
    kept = {}
    for name, result in zip(names, results):
        if result.error_msg is None:
            remove_artifact(result)
            kept[name] = schedules[name]
        else:
            logger.warning(
                "task %s keeps its untuned kernel: %s", name, result.error_msg.splitlines()[0]
            )
    return kept


def fallback_database(
    database: ms.Database, tasks: Sequence[Task], target: Target, untuned: Untuned
) -> ms.Database | None:
    """For :func:`~ms_heron.relax.compile_lowered`: the first programs HeronSearch would measure for
    the tasks ``database`` has no valid record for (its tuned tasks' best are the donors), with a
    warning naming what still runs untuned; None where there are none (``untuned`` "naive", or no
    such task), and compile_lowered warns itself."""
    missing = set(untuned_tasks(database, tasks, target)) if untuned == "analytical" else set()
    if not missing:
        return None
    searches_log = logging.getLogger("tvm.s_tir.meta_schedule")
    level = searches_log.level
    # what HeronSearch logs of a task's spaces concerns tuning it, not its first pick
    searches_log.setLevel(logging.ERROR)
    try:
        search = HeronSearch()
        # the tuned tasks' best programs, projected as a run's first rounds project them
        search.donors.take_stored(fastest_per_workload(database))
        first = {t.name: first_schedule(t, target, search) for t in tasks if t.name in missing}
    finally:
        searches_log.setLevel(level)
    schedules = built({name: sch for name, sch in first.items() if sch is not None}, target)
    picked = [(t.mod, schedules[t.name].trace) for t in tasks if t.name in schedules]
    if not picked:
        return None
    slow = sorted(missing - set(schedules))
    warnings.warn(
        f"{len(missing)} task(s) have no tuned schedule: {len(picked)} run the program the search "
        "would measure first (a tuned task's best projected, or the analytical model's pick), not "
        "measured"
        + (f", {len(slow)} run untuned (slow) kernels: {', '.join(slow)}" if slow else "")
        + "; tune them with more trials",
        stacklevel=3,
    )

    def apply(sch: Schedule) -> bool:
        for mod, trace in picked:
            if tvm_ffi.structural_equal(sch.mod["main"], mod["main"]):
                trace.apply_to_schedule(sch, remove_postproc=False)
                return True
        return False

    return ms.database.ScheduleFnDatabase(apply)
