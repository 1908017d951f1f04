"""The wall-clock budget: a person budgets in minutes and presses CTRL-C; MetaSchedule budgets in
trials.

One deadline (:class:`Budget`) is held in two places. Between rounds, :class:`WatchedSearch` wraps
any search strategy and returns no candidates once the deadline has passed or a stop was asked for,
so the round in flight finishes and is stored. Inside a round, :class:`BudgetedRunner` leaves the
rest of the candidates unmeasured (:data:`~ms_heron.records.NOT_RUN`, not stored as failures, so a
resumed run measures them). Build and run timeouts are capped by the budget
(:func:`budget_timeout`), so a hanging candidate overruns it by one timeout at most. A task whose
first round starts past the deadline gets a short one (:data:`LATE_ROUND`): a model's every task
needs a kernel, and building whole rounds of which one candidate each was measured cost a 2-minute
ResNet run 7 more minutes. The search wrapper also times "search overhead" (generating candidates
and taking in results, not building or measuring) for HeronSearch and MetaSchedule's evolutionary
search alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner.runner import PyRunner, PyRunnerFuture
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy

from ..records import NOT_RUN

#: MetaSchedule's default per-candidate build and run timeout, in seconds.
DEFAULT_TIMEOUT_S = 30.0
#: The least timeout a budget sets: a worker's start and its first int8 build (which registers the
#: VNNI intrinsic) take several seconds on a busy 2-core machine; a shorter one times them out.
MIN_TIMEOUT_S = 10.0
#: Candidates in a task's first round when it starts past the deadline, all measured: one build
#: batch of the search's leading picks (HeronSearch's: a program projected from another task and
#: an analytical choice), the faster kept, and a spare where one fails.
LATE_ROUND = 2


class Budget:
    """A wall-clock deadline shared by the search (no new round once it has passed) and the runner
    (the rest of a round is left unmeasured).

    A task's first round is ``guaranteed`` (the search sets it): past the deadline it is measured
    (:meth:`BudgetedRunner._owes`) until one candidate is valid or one times out, so every task of
    a model gets a kernel and a round of hanging candidates still costs one timeout at most.
    """

    def __init__(self, deadline: float | None = None, reserve_s: Callable[[], float] | None = None):
        self.deadline = deadline
        #: Seconds kept free before the deadline for work after tuning, asked as tuning goes.
        self.reserve_s = reserve_s
        self.guaranteed = False

    def spent(self) -> bool:
        if self.deadline is None:
            return False
        return time.monotonic() >= self.deadline - (
            self.reserve_s() if self.reserve_s is not None else 0.0
        )


class CandidateCost:
    """A measured candidate's wall time in a model's rounds, the price of work after tuning that
    builds and times candidates again (a :class:`Budget`'s reserve).

    Counted from the end of the first round: set-up (lowering, every task's design spaces and
    constraint models) comes before it. A ResNet-50's first round of 16 candidates ended 107 s into
    its run; counting those seconds, a 15-minute run reserved more than it had left after one round.
    The search's own work is left out too, since the work after tuning searches nothing: with the
    pretrained cost model ranking every task's first round, MobileNetV2's first rounds cost 0.7 s
    a candidate with the search and reserved 74 s of a 2-minute budget, which ended 46 s in.
    """

    def __init__(self):
        # (elapsed s, trials) when the first round ended
        self.first: tuple[float, int] | None = None
        self.last: tuple[float, int] | None = None

    def add_round(self, elapsed_s: float, trials: int, search_s: float = 0.0) -> None:
        """A round ended ``elapsed_s`` into the run, ``trials`` measured by then, ``search_s`` of
        those seconds spent searching."""
        self.last = (elapsed_s - search_s, trials)
        self.first = self.first or self.last

    def seconds(self) -> float:
        """Seconds per measured candidate since the first round; 0 until a second round measured
        one."""
        if self.first is None or self.last[1] <= self.first[1]:
            return 0.0
        return (self.last[0] - self.first[0]) / (self.last[1] - self.first[1])


def deadline_after(seconds: float | None) -> float | None:
    """When a budget of ``seconds`` from now ends, as a ``time.monotonic()`` instant (None: no
    budget).

    An entry point turns its budget into a deadline once, when it starts; every layer below passes
    the deadline on, so whatever each does first (a model's import and lowering, the workers' start)
    counts in the budget without being subtracted anywhere else."""
    return None if seconds is None else time.monotonic() + seconds


def seconds_left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (none is left past it); None without a deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def budget_timeout(deadline: float | None) -> float:
    """A build's or run's timeout under a deadline: a hanging candidate cannot outlast it."""
    left = seconds_left(deadline)
    return DEFAULT_TIMEOUT_S if left is None else max(MIN_TIMEOUT_S, min(DEFAULT_TIMEOUT_S, left))


@derived_object
class BudgetedRunner(PyRunner):
    """``inner`` measuring ``width`` candidates at a time (its parallel workers), leaving the rest
    of a round unmeasured (:data:`NOT_RUN`) once the :class:`Budget` is spent."""

    def __init__(self, inner: ms.runner.Runner, width: int = 1, budget: Budget | None = None):
        super().__init__()
        self.inner, self.width, self.budget = inner, max(1, width), budget or Budget()

    def until(self, budget: Budget) -> BudgetedRunner:
        """The same runner under ``budget``."""
        return BudgetedRunner(self.inner, self.width, budget)

    def run(self, runner_inputs):
        results = []
        valid = timed_out = False
        for start in range(0, len(runner_inputs), self.width):
            chunk = list(runner_inputs[start : start + self.width])
            if self.budget.spent() and not self._owes(start, valid, timed_out):
                results += [ms.runner.RunnerResult(None, NOT_RUN) for _ in chunk]
                continue
            ran = [future.result() for future in self.inner.run(chunk)]
            valid = valid or any(r.error_msg is None for r in ran)
            timed_out = timed_out or any("Timeout" in (r.error_msg or "") for r in ran)
            results += ran
        return [_Done(r) for r in results]

    def _owes(self, measured: int, valid: bool, timed_out: bool) -> bool:
        """Whether a round past the deadline measures on: a task's first round does, its first
        :data:`LATE_ROUND` candidates (the best of two picks) and on until one is valid, unless one
        hung (a round of hanging candidates costs one timeout)."""
        return self.budget.guaranteed and not timed_out and (not valid or measured < LATE_ROUND)


@derived_object
class _Done(PyRunnerFuture):
    """A runner future whose result is already known."""

    def __init__(self, result: ms.runner.RunnerResult):
        super().__init__()
        self.value = result

    def done(self) -> bool:
        return True

    def result(self) -> ms.runner.RunnerResult:
        return self.value


@derived_object
class WatchedSearch(PySearchStrategy):
    """``inner`` (a strategy or its MetaSchedule name) with a deadline, a stop switch and a
    stopwatch."""

    def __init__(
        self,
        inner,
        budget: Budget | None = None,
        search_seconds: list | None = None,
        stop: Callable[[], bool] | None = None,
    ):
        self.inner = SearchStrategy.create(inner) if isinstance(inner, str) else inner
        #: Once spent, no new round starts (the runner shares it).
        self.budget = budget or Budget()
        #: Asked before every round; True ends tuning there (e.g. after a CTRL-C).
        self.stop = stop
        #: Search work in seconds: set-up first, then one entry per round (shared with clones).
        self.search_seconds = [] if search_seconds is None else search_seconds
        #: This task's first round always runs, however long set-up took (a model's tasks are
        #: clones).
        self.first_round_done = False

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ):
        start = time.perf_counter()
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.search_seconds.append(time.perf_counter() - start)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def until(self, budget: Budget) -> WatchedSearch:
        """The same watch under ``budget``."""
        return WatchedSearch(self.inner, budget, self.search_seconds, self.stop)

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
            return None
        self.search_seconds.append(spent)
        first = not self.first_round_done
        self.budget.guaranteed, self.first_round_done = first, True
        return list(got)[:LATE_ROUND] if first and self.budget.spent() else got

    def notify_runner_results(self, measure_candidates, results) -> None:
        start = time.perf_counter()
        self.inner.notify_runner_results(measure_candidates, results)
        self.search_seconds[-1] += time.perf_counter() - start

    def clone(self):
        return WatchedSearch(self.inner.clone(), self.budget, self.search_seconds, self.stop)

    def search_s(self) -> float:
        """Search work so far, set-up included."""
        return sum(self.search_seconds)

    def per_round_seconds(self) -> float:
        """Mean search work per measured round (set-up excluded)."""
        rounds = self.search_seconds[1:]
        return sum(rounds) / len(rounds) if rounds else 0.0
