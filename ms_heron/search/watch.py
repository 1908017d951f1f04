"""Any search strategy with a wall-clock deadline, a stop request, a stopwatch and a per-round hook.

MetaSchedule budgets in trials only; a person budgets in minutes, and presses CTRL-C. Wrapping the
strategy is the one place that can end tuning cleanly: it returns no candidates once the deadline
has passed or a stop was asked for, so the round in flight finishes and is stored. The same wrapper times "search overhead" (generating
candidates and taking in results, not building or measuring) for HeronSearch and MetaSchedule's
evolutionary search alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy

from ..measure import Budget

#: Called after every measured round with the round's candidates and runner results.
RoundHook = Callable[[list, list], None]


@derived_object
class WatchedSearch(PySearchStrategy):
    """``inner`` (a strategy or its MetaSchedule name) with a deadline, a stopwatch and a round hook."""

    def __init__(
        self,
        inner,
        budget: Budget | None = None,
        on_round: RoundHook | None = None,
        search_seconds: list | None = None,
        stop: Callable[[], bool] | None = None,
    ):
        self.inner = SearchStrategy.create(inner) if isinstance(inner, str) else inner
        #: Once spent, no new round starts (the runner shares it).
        self.budget = budget or Budget()
        self.on_round = on_round
        #: Asked before every round; True ends tuning there (e.g. after a CTRL-C).
        self.stop = stop
        #: Search work in seconds: set-up first, then one entry per round (shared with clones).
        self.search_seconds = [] if search_seconds is None else search_seconds
        #: This task's first round always runs, however long set-up took (a model's tasks are clones).
        self.first_round_done = False

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        start = time.perf_counter()
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.search_seconds.append(time.perf_counter() - start)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def until(self, budget: Budget) -> WatchedSearch:
        """The same watch under ``budget``."""
        return WatchedSearch(self.inner, budget, self.on_round, self.search_seconds, self.stop)

    def generate_measure_candidates(self):
        if self.first_round_done and self.budget.spent():
            return None
        if self.stop is not None and self.stop():
            return None
        start = time.perf_counter()
        got = self.inner.generate_measure_candidates()
        spent = time.perf_counter() - start
        if got is None:
            self.search_seconds[-1] += spent
        else:
            self.search_seconds.append(spent)
            self.budget.guaranteed = not self.first_round_done
            self.first_round_done = True
        return got

    def notify_runner_results(self, measure_candidates, results) -> None:
        start = time.perf_counter()
        self.inner.notify_runner_results(measure_candidates, results)
        self.search_seconds[-1] += time.perf_counter() - start
        if self.on_round is not None:
            self.on_round(list(measure_candidates), list(results))

    def clone(self):
        return WatchedSearch(self.inner.clone(), self.budget, self.on_round, self.search_seconds, self.stop)

    def per_round_seconds(self) -> float:
        """Mean search work per measured round (set-up excluded)."""
        rounds = self.search_seconds[1:]
        return sum(rounds) / len(rounds) if rounds else 0.0
