"""ExpectedGain: a MetaSchedule task scheduler that spends a model's budget where latency is left.

MetaSchedule's gradient scheduler gives every task a first round, then follows each task's recent
improvement. Under a budget of minutes most tasks get one or two rounds, so what matters is which
ones. ExpectedGain holds each task's best kernel against its bound (:func:`~ms_heron.hardware.peak.
bound_parts`: the FMA or int8 (AMX or VNNI) peak for its flops, the measured memory bandwidth for
its bytes) and gives the next round to the task with the most model latency left above its bound:

    gain = calls x (best - bound) x discount ** (rounds in a row that did not improve the best)

A task within ``at_bound`` of its bound gets no further round. First rounds go largest task first
(calls x bound), so the tasks that hold the model's time are measured before the budget ends, and
the smaller ones of the same kind start from their projections (:mod:`.transfer`).

Rounds run one at a time: a task's round is measured and joined before the next task's candidates
are generated. So the next choice knows the last result, the donors of transfer are measured, and
no candidate is timed while another task compiles on the other cores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from ..hardware.peak import beats_the_peak, bound_parts, measure_peaks_again, share_of_bound
from ..records import best_seconds, record_seconds
from ..schedule.options import check


@dataclass(kw_only=True)
class TaskProgress:
    """What the scheduler knows of one task."""

    name: str
    calls: float
    bound_s: float
    #: The compute part of the bound: its flops at the measured peak.
    compute_s: float = 0.0
    best_s: float = math.inf
    rounds: int = 0
    #: Rounds in a row that did not improve ``best_s``.
    stale: int = 0

    def share_of_bound(self) -> float:
        return share_of_bound(self.bound_s, self.best_s)

    def gain(self, discount: float) -> float:
        """Model seconds a round of this task may still win; a task with no valid kernel yet is
        counted at ten times its bound."""
        best = self.best_s if self.best_s < math.inf else 10 * max(self.bound_s, 1e-6)
        return self.calls * (best - self.bound_s) * discount**self.stale


@derived_object
class ExpectedGain(PyTaskScheduler):
    """Next round to the task with the most model latency above its bound (see the module
    docstring).

    Parameters
    ----------
    at_bound
        A task whose best kernel reaches this share of its bound gets no further rounds. At 0.9,
        GPT-2's three largest matmuls (84% of its time) stopped after one round each, at 87-92% of
        their bound once timed again, while 1654 trials went to a task of 1% of the time
        (``bench/results/networks_15m_vs_5m.md``, 61cce97): a round's best is timed among many
        and reads a little fast, and the largest tasks are where a few percent is worth most. At
        0.97 (fe92972) they got 272-464 trials and came out at 86-89% all the same: there their
        design space, not the stop, is the limit.
    discount
        Factor on a task's gain for every round in a row that did not improve its best, so a task
        stuck far from its bound (a poor space, a bound it cannot reach) yields to the others.
    """

    def __init__(self, *, at_bound: float = 0.97, discount: float = 0.5):
        super().__init__()
        check(
            0.0 < at_bound <= 1.0,
            f"ExpectedGain(at_bound={at_bound}): give the share of its bound, in (0, 1], at "
            "which a task stops getting rounds",
        )
        check(
            0.0 < discount <= 1.0,
            f"ExpectedGain(discount={discount}): give a factor in (0, 1] for each round that did "
            "not improve a task",
        )
        self.at_bound = at_bound
        self.discount = discount
        self.tasks: list[TaskProgress] = []
        #: Times the peaks were measured again, a kernel having run faster than they allow.
        self.peaks_measured_again = 0

    def next_task_id(self) -> int:
        scheduler = self._outer()
        records = scheduler.tasks_
        if not self.tasks:
            self.tasks = [_start(record, scheduler.database_) for record in records]
        for task_id, record in enumerate(records):
            if record.measure_candidates is not None:  # the round sent last: join it first
                self._joined(task_id, scheduler.join_running_task(task_id))
        if self.peaks_measured_again < PEAK_MEASUREMENTS and beyond_peak(self.tasks):
            self._measure_peaks_again(records)
        for task_id in at_bound(self.tasks, self.at_bound):
            if not records[task_id].is_terminated:
                scheduler.terminate_task(task_id)
        return next_round(
            self.tasks, [i for i, r in enumerate(records) if not r.is_terminated], self.discount
        )

    def _measure_peaks_again(self, records) -> None:
        """A kernel beat the peak its bound was made from: the peak probe shared its core (with a
        worker process starting, say), and every bound is too long, so that tasks far from theirs
        looked done and stopped (ResNet-50 for AVX2 ended 15 minutes' tuning at 6, its kernels at
        "110-170%" of bounds made from half the FMA peak). Measure the peaks again and remake the
        bounds."""
        self.peaks_measured_again += 1
        targets = {str(r.ctx.target): r.ctx.target for r in records}
        for target in targets.values():
            measure_peaks_again(target)
        for task, record in zip(self.tasks, records):
            _bound(task, record.ctx.mod, record.ctx.target)

    def _joined(self, task_id: int, results) -> None:
        task = self.tasks[task_id]
        best = min(
            (record_seconds(r.run_secs) for r in results if r.error_msg is None), default=math.inf
        )
        task.rounds += 1
        task.stale = 0 if best < task.best_s else task.stale + 1
        task.best_s = min(task.best_s, best)


#: The peaks are measured again at most this often per run (each takes about 0.2 s).
PEAK_MEASUREMENTS = 2


def beyond_peak(tasks: Sequence[TaskProgress]) -> bool:
    """Whether a task's best kernel ran faster than its flops at the measured peak allow
    (:func:`~ms_heron.hardware.peak.beats_the_peak`)."""
    return any(beats_the_peak(t.compute_s, t.best_s) for t in tasks)


def at_bound(tasks: Sequence[TaskProgress], share: float) -> list[int]:
    """The tasks measured at least once whose best kernel reaches ``share`` of their bound."""
    return [i for i, task in enumerate(tasks) if task.rounds and task.share_of_bound() >= share]


def next_round(tasks: Sequence[TaskProgress], live: Sequence[int], discount: float) -> int:
    """Which of the ``live`` tasks gets the next round (-1: none is left): a task never measured,
    largest (calls x bound) first; else the one with the largest :meth:`TaskProgress.gain`."""
    if not live:
        return -1
    unmeasured = [i for i in live if not tasks[i].rounds]
    if unmeasured:
        return max(unmeasured, key=lambda i: tasks[i].calls * tasks[i].bound_s)
    return max(live, key=lambda i: tasks[i].gain(discount))


def _start(record, database) -> TaskProgress:
    """A task's call count, bound, and best record so far (a resumed work dir's)."""
    mod = record.ctx.mod
    task = TaskProgress(name=record.ctx.task_name, calls=float(record.task_weight), bound_s=0.0)
    _bound(task, mod, record.ctx.target)
    if database is not None:
        task.best_s = best_seconds(database, mod)
    return task


def _bound(task: TaskProgress, mod, target) -> None:
    """``task``'s bound and its compute part, from the peaks measured so far."""
    task.compute_s, memory_s = bound_parts(mod, target)
    task.bound_s = max(task.compute_s, memory_s)
