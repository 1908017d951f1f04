"""Tune a workload with MetaSchedule and fetch the best schedule, with ms_heron's set-up.

The set-up every tuning run on this stack needs: repaired VNNI intrinsic, a VNNI check for int8,
the fast builder, and a clear error when the database holds no valid record.
"""

from __future__ import annotations

import logging
from typing import Any

import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from .builder import local_builder
from .intrinsics import ensure_registered
from .targets import is_cpu, num_cores, require_vnni
from .workload import Workload

class NoValidRecord(RuntimeError):
    """Tuning produced no candidate that built and ran."""


def tune_workload(
    workload: Workload,
    target: Target,
    work_dir: str,
    max_trials: int,
    **tune_kwargs: Any,
) -> ms.Database:
    """:func:`tune_func` on a suite workload, refusing int8 on a target without VNNI first."""
    if workload.dtype == "int8":
        require_vnni(target)
    return tune_func(workload.func, target, work_dir, max_trials, **tune_kwargs)


def tune_func(
    func: tvm.tirx.PrimFunc,
    target: Target,
    work_dir: str,
    max_trials: int,
    *,
    num_trials_per_iter: int = 64,
    space: Any = "post-order-apply",
    strategy: Any = "evolutionary",
    seed: int | None = None,
    **tune_tir_kwargs: Any,
) -> ms.Database:
    """``ms.tune_tir`` on any PrimFunc into a JSONDatabase under ``work_dir``, with the set-up above."""
    ensure_registered()
    if is_cpu(target):
        num_cores(target)  # raises early with the fix when num-cores is missing
    tune_tir_kwargs.setdefault("builder", local_builder())
    drop_unnamed_log_handlers()
    return ms.tune_tir(
        func,
        target,
        work_dir,
        max_trials_global=max_trials,
        num_trials_per_iter=num_trials_per_iter,
        space=space,
        strategy=strategy,
        seed=seed,
        **tune_tir_kwargs,
    )


def drop_unnamed_log_handlers() -> None:
    """MetaSchedule re-configures its logger by handler *name* on every tune and crashes on a
    handler without one (pytest's log capture leaves such handlers behind between tunes)."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in logger.handlers if h.get_name() is None]:
        logger.removeHandler(handler)


def best_schedule(database: ms.Database, task: Workload | tvm.tirx.PrimFunc, target: Target) -> Schedule:
    """The database's fastest valid schedule for ``task``, rebuilt with stock MetaSchedule."""
    ensure_registered()
    func, name = (task.func, task.name) if isinstance(task, Workload) else (task, "the kernel")
    sch = ms.tir_integration.compile_tir(database, func, target)
    if sch is None:
        raise NoValidRecord(
            f"no valid tuning record for {name} on {target.kind.name}: every candidate failed "
            "to build or run; see the task log under <work_dir>/logs"
        )
    return sch
