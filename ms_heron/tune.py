"""Tune a kernel or a whole model with MetaSchedule, with ms_heron's set-up, and fetch the best.

The set-up every tuning run on this stack needs, in one place (:func:`_prepare`): the repaired VNNI
intrinsic registered, ``num-cores`` checked on CPU, the fast builder, MetaSchedule's logger made
safe; a VNNI check for int8 kernels; and a clear error when the database holds no valid record.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner.local_runner import default_run_evaluator
from tvm.target import Target

from .builder import local_builder
from .intrinsics import ensure_registered
from .records import open_database, record_seconds
from .relax import lower_for_tuning
from .search import HeronSearch, WatchedSearch
from .space import HeronSpace
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
    _prepare(target, tune_tir_kwargs)
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


def _prepare(target: Target, tune_kwargs: dict) -> None:
    """What every tuning call needs before MetaSchedule starts (see the module docstring)."""
    ensure_registered()
    if is_cpu(target):
        num_cores(target)  # raises early with the fix when num-cores is missing
    tune_kwargs.setdefault("builder", local_builder())
    _reset_metaschedule_logger()


@dataclass
class ModelRound:
    """Where model tuning stands after one measured round of one task."""

    task: str
    trials: int  # measured by this call so far, all tasks
    max_trials: int
    measured: int  # candidates in this round
    valid: int  # of them, the ones that built and ran
    best_seconds: dict[str, float]  # per task, from the database's records too; inf until one ran
    weights: dict[str, float]  # how often the model calls each task
    elapsed_s: float

    def model_seconds(self) -> float:
        """Estimated model latency: tasks' best kernels times their call counts (inf if any is missing)."""
        return sum(self.weights[t] * s for t, s in self.best_seconds.items())


@derived_object
class _ReportRounds(PyMeasureCallback):
    """Measure callback that turns MetaSchedule's per-task rounds into :class:`ModelRound` reports.

    Each task's best starts from the records already in the database, so a resumed run's model
    estimate counts what earlier runs found.
    """

    def __init__(self, on_round: Callable[[ModelRound], None], max_trials: int, database: ms.Database):
        self.on_round, self.max_trials, self.database = on_round, max_trials, database
        self.started, self.trials = time.monotonic(), 0
        self.best: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def _first_round(self, task_scheduler) -> None:
        for record in task_scheduler.tasks_:
            mod = record.ctx.mod
            top = self.database.get_top_k(self.database.commit_workload(mod), 1) if self.database.has_workload(mod) else []
            self.best[record.ctx.task_name] = record_seconds(top[0].run_secs) if top else float("inf")
            self.weights[record.ctx.task_name] = float(record.task_weight)

    def apply(self, task_scheduler, task_id, _candidates, _builder_results, runner_results) -> None:
        if not self.best:
            self._first_round(task_scheduler)
        name = task_scheduler.tasks_[task_id].ctx.task_name
        self.trials += len(runner_results)
        seconds = [record_seconds(r.run_secs) if r.error_msg is None else float("inf") for r in runner_results]
        self.best[name] = min([self.best[name], *seconds])
        self.on_round(ModelRound(name, self.trials, self.max_trials, len(seconds), sum(s < float("inf") for s in seconds),
                                 dict(self.best), self.weights, time.monotonic() - self.started))


def tune_model(
    mod: IRModule,
    params: Mapping[str, Any] | None,
    target: Target,
    work_dir: str,
    max_trials: int,
    *,
    max_trials_per_task: int | None = None,
    num_trials_per_iter: int = 16,
    space: Any = None,
    strategy: Any = None,
    seed: int | None = None,
    on_round: Callable[[ModelRound], None] | None = None,
    time_budget_s: float | None = None,
    exact_math: bool = False,
    **tune_kwargs: Any,
) -> ms.Database:
    """Tune every task of the model; ``max_trials`` in total, shared by MetaSchedule's gradient task
    scheduler. ``space``/``strategy`` default to HeronSpace/HeronSearch; pass "post-order-apply" /
    "evolutionary" for MetaSchedule's defaults. Records go to a JSONDatabase in ``work_dir``; running
    again on the same ``work_dir`` adds trials, and HeronSearch starts from the records there.

    ``on_round`` is called after every measured round; ``time_budget_s`` stops starting new rounds
    once that much wall-clock time has passed (each task still gets its first round).
    ``exact_math`` keeps exact exp/erf/tanh (see :func:`ms_heron.relax.lower_for_tuning`); compile
    with the same value. On the CPU, candidates are timed with their weights out of cache
    (:func:`cold_weights_runner`) unless a ``runner`` is given.
    """
    strategy = HeronSearch() if strategy is None else strategy
    if time_budget_s is not None:
        strategy = WatchedSearch(strategy, deadline=time.monotonic() + time_budget_s)
    os.makedirs(work_dir, exist_ok=True)
    tune_kwargs.setdefault("database", open_database(work_dir))
    if on_round is not None:
        report = _ReportRounds(on_round, max_trials, tune_kwargs["database"])
        tune_kwargs["measure_callbacks"] = [*ms.MeasureCallback.create("default"), report]
    if is_cpu(target):
        tune_kwargs.setdefault("runner", cold_weights_runner())
    lowered = lower_for_tuning(mod, params, target, exact_math=exact_math)
    _prepare(target, tune_kwargs)
    return ms.relax_integration.tune_relax(
        lowered,
        params={},
        target=target,
        work_dir=work_dir,
        max_trials_global=max_trials,
        max_trials_per_task=max_trials_per_task,
        num_trials_per_iter=num_trials_per_iter,
        space=HeronSpace() if space is None else space,
        strategy=strategy,
        seed=seed,
        **tune_kwargs,
    )


def cold_weights_runner(repeat: int = 10) -> ms.runner.LocalRunner:
    """A runner that times each call of a model's kernel with every argument but the first flushed
    from the CPU caches (``repeat`` single calls; :func:`cold_call_seconds` keeps the undisturbed ones).

    In a model a kernel's weights come from memory: the layer's other weights passed through the
    caches since its last call, while its first argument, the activation, was just written. Timed
    warm, as MetaSchedule's default runner does, the search prefers kernels that re-read a weight
    panel from L3 for every row block, which run up to 1.3x slower in the model than kernels that
    read it once (BERT's FFN projection, 768x3072 fp32). TVM's Ansor tutorials flush for the same
    reason.
    """
    return ms.runner.LocalRunner(
        evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=repeat, min_repeat_ms=0, enable_cpu_cache_flush=True),
        f_run_evaluator=cold_call_seconds,
    )


def cold_call_seconds(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """MetaSchedule's evaluator, minus the calls a descheduled worker thread stretched.

    Single calls after a flush leave the thread pool idle between them; now and then a worker is
    descheduled and one call takes milliseconds instead of microseconds. A record's time is the mean
    of its samples (MetaSchedule's cost model and task scheduler read it so), so those calls, more
    than 1.5x the median, are dropped before they turn a fast kernel's record into a slow one.
    """
    costs = default_run_evaluator(rt_mod, device, evaluator_config, repeated_args)
    median = statistics.median(costs)
    return [c for c in costs if c <= 1.5 * median]


def _reset_metaschedule_logger() -> None:
    """Make MetaSchedule's logger ready for another tune in this process.

    It re-configures its logger by handler *name* on every tune and crashes on a handler without
    one (pytest's log capture leaves such handlers behind), so those go. Its console level is the
    logger's level when a tune starts, but each tune leaves the logger at DEBUG: the level the user
    chose (kept by the last tune's console handler) is restored, or a second tune in the same
    process (the baseline arm) prints every round.
    """
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in logger.handlers if h.get_name() is None]:
        logger.removeHandler(handler)
    for handler in logger.handlers:
        if handler.get_name() == "tvm.s_tir.meta_schedule.console":
            logger.setLevel(handler.level)


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
