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
ResNet run 7 more minutes. Before the deadline, a first round is cut so that the tasks not yet
started all fit theirs in the time left (:meth:`WatchedSearch.first_round`). The search wrapper also
times every round (:class:`RoundClock`), its "search overhead" (generating candidates and taking in
results) apart from the rest (building, measuring, storing), for HeronSearch and MetaSchedule's
evolutionary search alike.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner.runner import PyRunner, PyRunnerFuture
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy

from ..records import NOT_RUN

#: The trials a run asks for when only its time budget bounds it: more than any budget measures,
#: so the budget ends tuning, not a count nobody chose (with 200, ViT's 17 tasks stopped after 2 of
#: the 6 minutes asked for).
BUDGET_BOUND_TRIALS = 1_000_000
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
        return self.left_s() <= 0.0

    def left_s(self) -> float:
        """Seconds until the deadline less the reserve (inf without a deadline)."""
        if self.deadline is None:
            return math.inf
        reserve = self.reserve_s() if self.reserve_s is not None else 0.0
        return self.deadline - reserve - time.monotonic()


class RoundClock:
    """A tuning call's rounds timed, shared by every clone of its search: the search's own work
    (generating candidates, taking in results) apart from the rest of a round (building, measuring,
    storing, training the cost model). A round runs from its candidates' generation to the next
    round's, so the rest is whatever the task loop does in between, and set-up (before the first
    round) is in neither.

    It prices a measured candidate for the work after tuning, which builds and times candidates
    again but searches nothing, and the first rounds under a deadline. Set-up is left out of both:
    a ResNet-50's first round of 16 candidates ended 107 s into its run, and counting those
    seconds, a 15-minute run reserved more than it had left after one round. So is the search:
    with the pretrained cost model ranking every task's first round, MobileNetV2's first rounds
    cost 0.7 s a candidate with the search and reserved 74 s of a 2-minute budget, which ended
    46 s in.
    """

    def __init__(self):
        #: Search work of each round, in order.
        self.search_s: list[float] = []
        #: Tasks set up, and tasks whose first round has started.
        self.tasks = self.first_rounds = 0
        #: Ended rounds: their seconds besides their search, and their candidates.
        self.ended: list[tuple[float, int]] = []
        self._open: tuple[float, int] | None = None  # the round in flight: its start, candidates

    def round_started(self, at: float, search_s: float, candidates: int) -> None:
        """A round of ``candidates`` started at ``at`` (``time.perf_counter()``) and generated
        them in ``search_s``; the round before it ends there."""
        if self._open is not None:
            start, count = self._open
            self.ended.append((at - start - self.search_s[-1], count))
        self._open = (at, candidates)
        self.search_s.append(search_s)

    def searched(self, seconds: float) -> None:
        """More search work in the round in flight (taking in its results); none is in flight
        before the first round."""
        if self.search_s:
            self.search_s[-1] += seconds

    def round_search_s(self) -> float:
        """Mean search work per round (set-up excluded)."""
        return sum(self.search_s) / len(self.search_s) if self.search_s else 0.0

    def typical_search_s(self) -> float:
        """A round's search work as it prices the rounds to come: the median, since the first two
        rounds pay once for what the later ones reuse. With the pretrained cost model, ResNet-50's
        (whole rounds of 16, the booster loaded) searched 3.5 and 2.3 s, the 39 after 0.2-0.3 s
        each; priced by the mean, every later first round was cut to :data:`LATE_ROUND`, and the
        run measured 110 candidates where the same run without the model measured 249 (020e9b4's
        rows of ``bench/results/networks_2m_vs_5m.md`` as c330126 committed them; priced by the
        median, 232)."""
        return statistics.median(self.search_s) if self.search_s else 0.0

    def candidate_s(self) -> float:
        """Seconds per candidate besides the search: the median over the ended rounds, since one
        round of a slow build (16 s for 16 candidates amid rounds of 0.3 s a candidate) must not
        price them all; 0 before a round ended."""
        costs = [s / n for s, n in self.ended if n]
        return statistics.median(costs) if costs else 0.0


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
    :class:`RoundClock`."""

    def __init__(
        self,
        inner,
        budget: Budget | None = None,
        clock: RoundClock | None = None,
        stop: Callable[[], bool] | None = None,
    ):
        self.inner = SearchStrategy.create(inner) if isinstance(inner, str) else inner
        #: Once spent, no new round starts (the runner shares it).
        self.budget = budget or Budget()
        #: Asked before every round; True ends tuning there (e.g. after a CTRL-C).
        self.stop = stop
        #: Times the rounds of every clone (a model's tasks are clones).
        self.clock = clock or RoundClock()
        #: This task's first round always runs, however long set-up took.
        self.first_round_done = False
        #: Candidates per round (MetaSchedule's ``num_trials_per_iter``).
        self.full_round = 0

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ):
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
        self.clock.tasks += 1
        self.full_round = int(num_trials_per_iter)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def until(self, budget: Budget) -> WatchedSearch:
        """The same watch under ``budget``."""
        return WatchedSearch(self.inner, budget, self.clock, self.stop)

    def generate_measure_candidates(self):
        if self.first_round_done and self.budget.spent():
            return None
        if self.stop is not None and self.stop():
            return None
        # a first round's size is known before the search breeds for it
        size = self.full_round if self.first_round_done else self.first_round(self.full_round)
        start = time.perf_counter()
        # HeronSearch breeds for the size; the measuring workers import this module, not the search
        sized = getattr(self.inner, "generate_round", None)
        got = sized(size) if sized is not None else self.inner.generate_measure_candidates()
        spent = time.perf_counter() - start
        if got is None:
            self.clock.searched(spent)
            return None
        got = list(got)[:size]
        self.clock.first_rounds += not self.first_round_done
        self.budget.guaranteed, self.first_round_done = not self.first_round_done, True
        self.clock.round_started(start, spent, len(got))
        return got

    def first_round(self, full: int) -> int:
        """How many of ``full`` candidates this task's first round measures: all while nothing is
        known of what a round costs, :data:`LATE_ROUND` past the deadline, else as many as let the
        tasks not yet started (this one too) fit their first rounds in the time left, priced by
        the rounds so far (a round's search and its candidates), and at least
        :data:`LATE_ROUND`.

        A model's every task needs a kernel before any task's second round pays. Under a 2-minute
        budget, whole first rounds took MobileNetV2's first 12 to 17 of 35 tasks (largest first)
        to the deadline, and the other tasks' late rounds ran on past it: 2 seeds ended at 179 and
        176 s. Sized, they ended at 120 and 123 s, and their kernels, timed in turn with those of
        the longer runs in one process, ran 1% and 11% faster (6.94 against 7.02 ms, 6.31 against
        7.07).
        """
        left, per_candidate = self.budget.left_s(), self.clock.candidate_s()
        if left <= 0.0:
            return min(full, LATE_ROUND)
        if left == math.inf or per_candidate <= 0.0:
            return full
        per_task = left / max(1, self.clock.tasks - self.clock.first_rounds)
        fits = int((per_task - self.clock.typical_search_s()) / per_candidate)
        return max(min(full, LATE_ROUND), min(full, fits))

    def notify_runner_results(self, measure_candidates, results) -> None:
        start = time.perf_counter()
        self.inner.notify_runner_results(measure_candidates, results)
        self.clock.searched(time.perf_counter() - start)

    def clone(self):
        return WatchedSearch(python_clone(self.inner), self.budget, self.clock, self.stop)


def python_clone(strategy):
    """``strategy``'s clone, keeping a Python-derived strategy's class: a clone made through TVM's
    FFI comes back as the base object, whose Python methods (``HeronSearch.generate_round``) are
    out of reach."""
    inst = getattr(strategy, "_inst", None)
    return inst.clone() if inst is not None else strategy.clone()
