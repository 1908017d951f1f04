"""What every tuning call needs before MetaSchedule starts, in one place: which search, and the
set-up.

:func:`prepare` registers the intrinsics records name, checks ``num-cores`` on CPU, puts in the fast
builder (TVM's stock builder workers import its intrinsic library first, 15-25 s each), the shared
XGBoost cost model, the runner
under the time budget, the storing callbacks that check writes landed, and a MetaSchedule logger
ready for another tune in this process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Literal

from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..hardware.targets import is_cpu, num_cores
from ..intrinsics import ensure_registered
from ..records import appends_to, measure_callbacks, open_database, records_file
from ..search import HeronSearch
from ..search.features import xgb_cost_model
from ..space import HeronSpace
from .budget import Budget, BudgetedRunner, WatchedSearch, budget_timeout
from .builder import local_builder
from .measure import local_runner_for

#: Which search tunes: ``"heron"``, HeronSpace + HeronSearch (and ExpectedGain over a model's
#: tasks), or ``"metaschedule"``, MetaSchedule's default (post-order-apply space, evolutionary
#: search, gradient task scheduler). Every entry point takes it, and defaults to ``"heron"``.
Search = Literal["heron", "metaschedule"]


def search_parts(search: Search, space: Any = None, strategy: Any = None) -> tuple[Any, Any]:
    """The space generator and search strategy of ``search``; ``space``/``strategy`` replace its own
    (a HeronSpace with your rules, a HeronSearch with other options)."""
    if search == "heron":
        defaults = (HeronSpace, HeronSearch)
    elif search == "metaschedule":
        defaults = (lambda: "post-order-apply", lambda: "evolutionary")
    else:
        raise ValueError(
            f"search={search!r}: choose 'heron' (HeronSpace + HeronSearch) or 'metaschedule' "
            "(MetaSchedule's default search)"
        )
    return (
        defaults[0]() if space is None else space,
        defaults[1]() if strategy is None else strategy,
    )


def prepare(
    target: Target,
    work_dir: str,
    tune_kwargs: dict,
    strategy: Any,
    *,
    deadline: float | None,
    cold: bool,
    callbacks: Callable[[ms.Database], list] | None = None,
    reserve_s: Callable[[], float] | None = None,
) -> Any:
    """What every tuning call needs before MetaSchedule starts (see the module docstring); returns
    ``strategy`` with the budget's deadline.

    The budget ends at ``deadline`` (:func:`.budget.deadline_after`), set-up included. It holds
    between rounds (:class:`WatchedSearch`) and inside one (:class:`BudgetedRunner`), and build and
    run timeouts are capped by it, so a hanging candidate overruns it by one timeout at most;
    ``reserve_s`` keeps that many seconds of it for what follows tuning.
    """
    ensure_registered(target)
    if is_cpu(target):
        num_cores(target)  # raises early with the fix when num-cores is missing
    budget = Budget(deadline, reserve_s)
    if "builder" not in tune_kwargs:
        tune_kwargs["builder"] = builder_for(deadline)
    runner = tune_kwargs.get("runner") or runner_for(target, cold=cold, deadline=deadline)
    tune_kwargs.setdefault("cost_model", xgb_cost_model())
    runner = ms.runner.create(runner) if isinstance(runner, str) else runner
    tune_kwargs["runner"] = (
        runner if isinstance(runner, BudgetedRunner) else BudgetedRunner(runner)
    ).until(budget)
    os.makedirs(work_dir, exist_ok=True)
    if "database" not in tune_kwargs:
        tune_kwargs["database"] = open_database(work_dir, target)
    # the file to check writes landed in: only the work dir's own database
    records = records_file(work_dir) if appends_to(tune_kwargs["database"], work_dir) else None
    tune_kwargs["measure_callbacks"] = [
        *measure_callbacks(tune_kwargs["database"], records),
        *(callbacks(tune_kwargs["database"]) if callbacks else ()),
    ]
    reset_metaschedule_logger()
    return (strategy if isinstance(strategy, WatchedSearch) else WatchedSearch(strategy)).until(
        budget
    )


def builder_for(deadline: float | None) -> ms.builder.Builder:
    """ms_heron's builder, its timeout capped by the deadline."""
    return local_builder(deadline=deadline)


def runner_for(target: Target, *, cold: bool, deadline: float | None) -> ms.runner.Runner:
    """A local runner, timing cold on the CPU if ``cold``, its timeout capped by the deadline."""
    return local_runner_for(cold=cold and is_cpu(target), timeout_s=budget_timeout(deadline))


def reset_metaschedule_logger() -> None:
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
