"""A search strategy wrapper that times the search's own work, for either arm of a benchmark.

"Search overhead" is what a strategy spends outside build and measurement: generating candidates
and taking in results. Wrapping MetaSchedule's evolutionary search and HeronSearch the same way
measures both with one stopwatch.
"""

from __future__ import annotations

import time

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy


@derived_object
class TimedStrategy(PySearchStrategy):
    def __init__(self, inner, seconds: list | None = None):
        self.inner = SearchStrategy.create(inner) if isinstance(inner, str) else inner
        #: Seconds of search work per round, shared with clones (MetaSchedule clones per task).
        self.seconds = [] if seconds is None else seconds

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        start = time.perf_counter()
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.seconds.append(time.perf_counter() - start)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        start = time.perf_counter()
        got = self.inner.generate_measure_candidates()
        if got is not None:
            self.seconds.append(time.perf_counter() - start)
        else:
            self.seconds[-1] += time.perf_counter() - start
        return got

    def notify_runner_results(self, measure_candidates, results) -> None:
        start = time.perf_counter()
        self.inner.notify_runner_results(measure_candidates, results)
        self.seconds[-1] += time.perf_counter() - start

    def clone(self):
        return TimedStrategy(self.inner.clone(), self.seconds)
