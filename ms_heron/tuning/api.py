"""Tune a kernel or a whole model from Python, and put the tuning in a Relax pipeline.

Thin entry points over the one loop (:mod:`.loop`): :func:`tune_func` and :func:`tune_workload` tune
a kernel, :func:`tune_model` a model as a :class:`~ms_heron.tuning.run.TuningRun` (as the command
does), :func:`tune_pass` and :func:`static_shape_tuning_pipeline` the fused kernels of a Relax
pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import tvm
from tvm import IRModule, relax
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..relax import bind_params, model_tasks
from ..workloads import Workload
from .budget import deadline_after
from .loop import (
    TRIALS_PER_ROUND,
    NoValidRecord,
    TuningRound,
    best_schedule,
    kernel_task,
    tune_tasks,
    workload_task,
)
from .run import TuningRun
from .setup import Search
from .store import RecordStore
from .workdir import Progress, RunSpec

__all__ = [
    "NoValidRecord",
    "TuningRound",
    "best_schedule",
    "static_shape_tuning_pipeline",
    "tune_func",
    "tune_model",
    "tune_pass",
    "tune_workload",
]


def tune_workload(
    workload: Workload,
    target: Target,
    work_dir: str,
    max_trials_global: int,
    **tune_kwargs: Any,
) -> ms.Database:
    """:func:`tune_func` on a suite workload, refusing first one the target cannot run
    (:func:`workload_task`)."""
    return tune_tasks(
        [workload_task(workload, target)],
        target,
        work_dir,
        max_trials_global,
        **_kernel_options(tune_kwargs),
    )


def _kernel_options(options: dict) -> dict:
    """A kernel alone is timed with warm operands, as ``ms.tune_tir`` times it; a ``time_budget_s``
    runs from this call on."""
    budget_s = options.pop("time_budget_s", None)
    return {"cold": False, "deadline": deadline_after(budget_s), **options}


def tune_func(
    func: tvm.tirx.PrimFunc,
    target: Target,
    work_dir: str,
    max_trials_global: int,
    **options: Any,
) -> ms.Database:
    """``ms.tune_tir`` on any PrimFunc into a JSONDatabase under ``work_dir``: :func:`tune_tasks` on
    the one task. ``options`` are its own, with ``time_budget_s`` (wall-clock seconds from this
    call) in place of its ``deadline``."""
    return tune_tasks(
        [kernel_task(func)], target, work_dir, max_trials_global, **_kernel_options(options)
    )


def tune_model(
    mod: IRModule,
    params: Mapping[str, Any] | None,
    target: Target,
    work_dir: str,
    max_trials_global: int,
    *,
    search: Search = "heron",
    space: Any = None,
    strategy: Any = None,
    task_scheduler: Any = None,
    num_trials_per_iter: int = TRIALS_PER_ROUND,
    seed: int = 0,
    on_round: Callable[[Progress], None] | None = None,
    time_budget_s: float | None = None,
    runner: ms.runner.Runner | None = None,
    exact_math: bool = False,
    store: RecordStore | Literal["default"] | None = "default",
    records_from: Sequence[str] = (),
    retune: bool = False,
    pretrained_model: bool = False,
) -> ms.Database:
    """Tune every fused kernel of a Relax model as ``ms-heron tune-model`` does: a
    :class:`~ms_heron.tuning.run.TuningRun` in ``work_dir`` (its lock, run file and progress log),
    until it holds ``max_trials_global`` records (a second call on the same work dir resumes), each
    task's best kernels timed again at the end. Returns the kernel each task runs, for
    :func:`~ms_heron.relax.compile_model`.

    Parameters
    ----------
    search, space, strategy, task_scheduler
        The search (:data:`Search`), or parts that replace its own (:func:`.loop.tune_tasks`).
    num_trials_per_iter
        Candidates measured per task round.
    on_round
        Called with the run's :class:`~ms_heron.tuning.workdir.Progress` after every measured round.
    time_budget_s
        Wall-clock seconds, the model's lowering included.
    runner
        Measures elsewhere (:meth:`ms_heron.tuning.measure.Tracker.runner`).
    exact_math
        Keep exact exp/erf/tanh (see :func:`ms_heron.relax.lower_for_tuning`); compile with the same
        value.
    store, records_from, retune
        Tasks tuned before for this target, found in the records store (``"default"``: the
        user's, :func:`.store.default_store_dir`; None: none) or in ``records_from``, are timed
        again instead of tuned, unless ``retune``; the run's best programs are kept in the store
        (:meth:`.run.TuningRun.tune`).
    pretrained_model
        Start the cost model from the shipped pretrained one (:mod:`ms_heron.search.pretrained`)
        instead of untrained.
    """
    deadline = deadline_after(time_budget_s)
    run = TuningRun.create(
        work_dir, RunSpec.of_relax(mod, params, work_dir, target, seed, exact_math=exact_math)
    )
    run.tune(
        max_trials_global,
        search=search,
        deadline=deadline,
        on_round=on_round,
        num_trials_per_iter=num_trials_per_iter,
        runner=runner,
        space=space,
        strategy=strategy,
        task_scheduler=task_scheduler,
        store=RecordStore() if store == "default" else store,
        records_from=records_from,
        retune=retune,
        pretrained_model=pretrained_model,
    )
    return run.chosen_database()


def tune_pass(
    params: Mapping[str, Any] | None,
    work_dir: str,
    max_trials_global: int,
    max_trials_per_task: int | None = None,
    *,
    time_budget_s: float | None = None,
    search: Search = "heron",
) -> tvm.transform.Pass:
    """Relax's ``MetaScheduleTuneIRMod`` with Heron: the same parameters (plus a time budget), so a
    Relax pipeline takes Heron by swapping this pass in. It tunes the module's fused kernels into a
    JSONDatabase in ``work_dir`` for the pipeline's target (``with target:``) and returns the module
    unchanged; ``relax.transform.MetaScheduleApplyDatabase(work_dir)`` then puts the kernels in."""

    @tvm.transform.module_pass(opt_level=0, name="HeronTuneIRMod")
    def heron_tune(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        deadline = deadline_after(time_budget_s)
        target = Target.current(allow_none=True)
        if target is None:
            raise ValueError(
                "HeronTuneIRMod tunes for the pipeline's target: run it under `with "
                "tvm.target.Target(...)`, as relax pipelines do"
            )
        tune_tasks(
            model_tasks(bind_params(mod, params), target),
            target,
            work_dir,
            max_trials_global,
            cold=True,
            max_trials_per_task=max_trials_per_task,
            deadline=deadline,
            search=search,
        )
        return mod

    return heron_tune


def static_shape_tuning_pipeline(
    total_trials: int,
    target: str | dict | Target,
    work_dir: str = "tuning_logs",
    *,
    max_trials_per_task: int | None = None,
    time_budget_s: float | None = None,
) -> tvm.transform.Pass:
    """``relax.pipeline.static_shape_tuning_pipeline`` with :func:`tune_pass` in place of
    ``MetaScheduleTuneIRMod`` (TVM's steps otherwise: decompose for inference, legalize and fuse,
    tune, apply the database). ms_heron's own lowering (:func:`ms_heron.relax.lower_for_tuning`)
    adds ONNX Runtime's graph rewrites and fast math; each is a pass in :mod:`ms_heron.relax.passes`
    to put before this pipeline."""
    target = Target(target) if not isinstance(target, Target) else target

    @tvm.transform.module_pass(opt_level=0, name="HeronStaticShapeTuning")
    def pipeline(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        with target:
            return tvm.transform.Sequential(
                [
                    relax.transform.DecomposeOpsForInference(),
                    relax.transform.CanonicalizeBindings(),
                    relax.pipeline.zero_pipeline(),
                    tune_pass(
                        {}, work_dir, total_trials, max_trials_per_task, time_budget_s=time_budget_s
                    )
                    if total_trials > 0
                    else tvm.transform.Sequential([]),
                    relax.transform.MetaScheduleApplyDatabase(work_dir),
                ]
            )(mod)

    return pipeline
