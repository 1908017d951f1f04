"""Tune a workload with MetaSchedule and fetch the best schedule, with ms_heron's set-up.

The set-up every tuning run on this stack needs: repaired VNNI intrinsic, a VNNI check for int8,
the fast builder, and a clear error when the database holds no valid record.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from .builder import local_builder
from .intrinsics import ensure_registered
from .targets import is_cpu, num_cores, require_vnni
from .workloads import Workload



#: The two files of MetaSchedule's JSONDatabase in a work dir.
DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def open_database(work_dir: str | Path) -> ms.database.JSONDatabase:
    """The JSONDatabase in ``work_dir``, readable after a killed run (torn last lines are cut)
    and with the intrinsics its records name registered."""
    ensure_registered()
    for name in DATABASE_FILES:
        cut_torn_line(Path(work_dir) / name)
    return ms.database.JSONDatabase(work_dir=str(work_dir))


def cut_torn_line(path: Path) -> None:
    """Drop a last line a killed process left half-written (every complete line ends in a newline)."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())


class NoValidRecord(RuntimeError):
    """Tuning produced no candidate that built and ran."""


def tune_workload(
    workload: Workload,
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
    """``ms.tune_tir`` on ``workload.func`` into a JSONDatabase under ``work_dir``."""
    if workload.dtype == "int8":
        require_vnni(target)
    ensure_registered()
    if is_cpu(target):
        num_cores(target)  # raises early with the fix when num-cores is missing
    tune_tir_kwargs.setdefault("builder", local_builder())
    drop_unnamed_log_handlers()
    return ms.tune_tir(
        workload.func,
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


def best_schedule(database: ms.Database, workload: Workload, target: Target) -> Schedule:
    """The database's fastest valid schedule for ``workload``, rebuilt with stock MetaSchedule."""
    ensure_registered()
    sch = ms.tir_integration.compile_tir(database, workload.func, target)
    if sch is None:
        raise NoValidRecord(
            f"no valid tuning record for {workload.name} on {target.kind.name}: every candidate failed "
            "to build or run; see the task log under <work_dir>/logs"
        )
    return sch
