"""The one tuning loop: a kernel (one task) or a model (its fused kernels) into MetaSchedule's task
loop with the set-up of :mod:`.setup`, each measured round reported once its records are stored, and
the best schedule fetched back.

Every entry point ends here: :class:`~ms_heron.tuning.run.TuningRun` (the command, the demo,
``tune_model``), :func:`~ms_heron.tuning.api.tune_func` and the Relax pass
:func:`~ms_heron.tuning.api.tune_pass`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.utils import fork_seed
from tvm.target import Target

from ..errors import HeronError
from ..hardware.dot_products import kernel_dot_product, require_dot_product
from ..hardware.targets import cpu_name
from ..intrinsics import ensure_registered
from ..records import best_seconds, disk_errors_surface, result_seconds, was_run
from ..relax import Task
from ..search.pretrained import pretrained_cost_model
from ..search.task_scheduler import ExpectedGain
from ..workloads import Workload, WorkloadError
from .setup import Search, prepare, search_parts

#: Candidates measured per round (MetaSchedule's num_trials_per_iter), a kernel's or one task of a
#: model's, the default of every entry point: enough for the cost models to learn from each round,
#: few enough that a killed run loses little and a model's budget of minutes reaches every task.
TRIALS_PER_ROUND = 16


class NoValidRecord(HeronError, RuntimeError):
    """Tuning produced no candidate that built and ran."""


def kernel_task(func: tvm.tirx.PrimFunc) -> Task:
    """A kernel alone as the one task of a run, named and marked as ``ms.tune_tir`` does: a
    TVMScript kernel without a symbol is built as ``main``, its buffers declared not to alias."""
    if not (func.attrs and "global_symbol" in func.attrs):
        func = func.with_attr("global_symbol", "main")
    return Task("main", IRModule({"main": func.with_attr("tirx.noalias", True)}))


def tune_tasks(
    tasks: Sequence[Task],
    target: Target,
    work_dir: str,
    max_trials_global: int,
    *,
    cold: bool,
    search: Search = "heron",
    space: Any = None,
    strategy: Any = None,
    task_scheduler: Any = None,
    max_trials_per_task: int | None = None,
    num_trials_per_iter: int = TRIALS_PER_ROUND,
    seed: int | None = None,
    on_round: Callable[[TuningRound], None] | None = None,
    deadline: float | None = None,
    reserve_s: Callable[[], float] | None = None,
    pretrained_model: bool = False,
    **tune_kwargs: Any,
) -> ms.Database:
    """The one call into MetaSchedule's task loop (``tune_tasks``, under ``ms.tune_tir`` and
    ``tune_relax`` alike), for a kernel and for a model: ``max_trials_global`` in total over
    ``tasks``, records to a JSONDatabase in ``work_dir`` (running again adds trials; HeronSearch
    starts from the records there), with the set-up of :mod:`.setup`.

    Parameters
    ----------
    cold
        Time candidates with their weights out of cache, as a model's kernels run
        (:func:`ms_heron.tuning.measure.evaluator_config`).
    search
        HeronSpace + HeronSearch, or MetaSchedule's default search (:data:`Search`).
    space, strategy
        Replace the search's own space generator or strategy.
    task_scheduler
        Shares the trials out over the tasks: by default ExpectedGain for ``search`` "heron" and
        several tasks (it ends a task at its bound), else MetaSchedule's "gradient" (a kernel alone
        runs to its trial count).
    on_round
        Called after every measured round, once its records are stored.
    deadline
        No round starts, and no candidate is measured, past this ``time.monotonic()`` instant
        (:func:`.budget.deadline_after`); each task's first round always runs.
    reserve_s
        Keeps that many seconds of the budget free for what follows (asked as tuning goes).
    pretrained_model
        Start the heron search's program-feature cost model from the shipped pretrained one
        (:mod:`ms_heron.search.pretrained`) instead of untrained, as MetaSchedule's starts. A
        ``cost_model`` in ``tune_kwargs`` replaces either.
    tune_kwargs
        Passed to MetaSchedule's ``tune_tasks``; a ``runner`` (e.g.
        :meth:`ms_heron.tuning.measure.Tracker.runner`) measures elsewhere.
    """
    space, strategy = search_parts(search, space, strategy)
    if search == "heron" and pretrained_model and "cost_model" not in tune_kwargs:
        tune_kwargs["cost_model"] = pretrained_cost_model()
    if task_scheduler is None:
        task_scheduler = ExpectedGain() if search == "heron" and len(tasks) > 1 else "gradient"
    strategy = prepare(
        target,
        work_dir,
        tune_kwargs,
        strategy,
        deadline=deadline,
        cold=cold,
        callbacks=_reporter(on_round, max_trials_global),
        reserve_s=reserve_s,
    )
    names = [t.name for t in tasks]
    contexts = [
        ms.TuneContext(
            mod=task.mod,
            target=target,
            space_generator=space,
            search_strategy=strategy,
            task_name=task.name,
            logger=logger,
            rand_state=rand_state,
            num_threads="physical",
        ).clone()
        for task, logger, rand_state in zip(
            tasks, get_loggers_from_work_dir(work_dir, names), fork_seed(seed, n=len(tasks))
        )
    ]
    with disk_errors_surface(tune_kwargs["measure_callbacks"]):
        return ms.tune.tune_tasks(
            tasks=contexts,
            task_weights=[t.weight for t in tasks],
            work_dir=work_dir,
            max_trials_global=max_trials_global,
            max_trials_per_task=max_trials_per_task,
            num_trials_per_iter=num_trials_per_iter,
            task_scheduler=task_scheduler,
            **tune_kwargs,
        )


def workload_task(workload: Workload, target: Target) -> Task:
    """A workload as a kernel run's one task; an int8 one the target has no dot product for, or
    whose weight is packed for another CPU's, is refused here, with the fix."""
    if workload.dtype == "int8":
        require_dot_product(target)
        dot = kernel_dot_product(workload.func, target)  # the byte multiply's for narrow weights
        if workload.tile not in (None, dot.tile):
            lanes, red = workload.tile
            raise WorkloadError(
                f"{workload.name}: its weight is packed in {lanes} x {red} tiles, but "
                f"{cpu_name(target)}'s int8 dot product ({dot.isa}) reads {dot.lanes} x "
                f"{dot.reduction}; build it for the target: workloads.make(..., target=target) or "
                "workloads.case(..., target=target)"
            )
    return kernel_task(workload.func)


@dataclass(kw_only=True)
class TuningRound:
    """Where tuning stands after one measured round of one task (a kernel run has one task)."""

    task: str
    trials: int  # measured by this call so far, all tasks
    max_trials_global: int
    measured: int  # candidates in this round
    valid: int  # of them, the ones that built and ran
    best_seconds: dict[str, float]  # per task, from the database's records too; inf until one ran
    weights: dict[str, float]  # how often the model calls each task
    elapsed_s: float

    def model_seconds(self) -> float:
        """Estimated latency: tasks' best kernels times their call counts (inf if any is missing); a
        kernel run's best."""
        return sum(self.weights[t] * s for t, s in self.best_seconds.items())


@derived_object
class _ReportRounds(PyMeasureCallback):
    """Measure callback that turns MetaSchedule's per-task rounds into :class:`TuningRound` reports.
    It follows the callback that stores the round, so a report never counts a record not yet on
    disk.

    Each task's best starts from the records already in the database, so a resumed run's
    estimate counts what earlier runs found.
    """

    def __init__(
        self, on_round: Callable[[TuningRound], None], max_trials_global: int, database: ms.Database
    ):
        self.on_round, self.max_trials_global, self.database = on_round, max_trials_global, database
        self.started, self.trials = time.monotonic(), 0
        self.best: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def _first_round(self, task_scheduler) -> None:
        for record in task_scheduler.tasks_:
            self.best[record.ctx.task_name] = best_seconds(self.database, record.ctx.mod)
            self.weights[record.ctx.task_name] = float(record.task_weight)

    def apply(self, task_scheduler, task_id, _candidates, _builder_results, runner_results) -> None:
        if not self.best:
            self._first_round(task_scheduler)
        name = task_scheduler.tasks_[task_id].ctx.task_name
        ran = [r for r in runner_results if was_run(r)]
        self.trials += len(ran)
        seconds = [result_seconds(r) for r in ran]
        self.best[name] = min([self.best[name], *seconds])
        self.on_round(
            TuningRound(
                task=name,
                trials=self.trials,
                max_trials_global=self.max_trials_global,
                measured=len(seconds),
                valid=sum(s < math.inf for s in seconds),
                best_seconds=dict(self.best),
                weights=self.weights,
                elapsed_s=time.monotonic() - self.started,
            )
        )


def _reporter(
    on_round: Callable[[TuningRound], None] | None, max_trials_global: int
) -> Callable[[ms.Database], list] | None:
    """The measure callbacks (given the database) that report rounds to ``on_round``."""
    return (
        None
        if on_round is None
        else (lambda database: [_ReportRounds(on_round, max_trials_global, database)])
    )


def best_schedule(
    database: ms.Database, task: Workload | tvm.tirx.PrimFunc, target: Target
) -> Schedule:
    """The database's fastest valid schedule for ``task``, rebuilt with stock MetaSchedule."""
    ensure_registered(target)
    func, name = (task.func, task.name) if isinstance(task, Workload) else (task, "the kernel")
    sch = ms.tir_integration.compile_tir(database, func, target)
    if sch is None:
        raise NoValidRecord(
            f"no valid tuning record for {name} on {target.kind.name}: every candidate failed "
            "to build or run; see the task log under <work_dir>/logs"
        )
    return sch
