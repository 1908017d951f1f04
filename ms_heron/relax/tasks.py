"""A lowered model's tasks as the tuner and the reports see them: extracted once per run
(:func:`model_tasks`), with calls per model run, best kernel so far, trials, and the least time each
can take here (its bound). The reports' tables of them are :mod:`ms_heron.report.tables`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tvm import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..hardware.peak import beats_the_peak, bound_parts, measure_peaks_again, share_of_bound
from ..records import chosen_record, record_key, top_records
from ..schedule.annotations import is_metaschedule_space


def extract_tasks(lowered: IRModule, target: Target) -> list[ms.ExtractedTask]:
    """The tuning tasks of a lowered model (one per distinct fused TIR function)."""
    return list(ms.relax_integration.extract_tasks(lowered, target))


@dataclass(frozen=True)
class Task:
    """One kernel to tune: a model's fused function, called ``weight`` times per model run, or a
    kernel alone."""

    name: str
    mod: IRModule
    weight: float = 1.0


def model_tasks(lowered: IRModule, target: Target) -> list[Task]:
    """A lowered model's tasks: one per distinct fused function, weighted by its calls."""
    return [
        Task(t.task_name, t.dispatched[0], float(t.weight)) for t in extract_tasks(lowered, target)
    ]


@dataclass(kw_only=True, frozen=True)
class TaskTime:
    """One fused kernel of a model: how often the model calls it, its best measured time and how
    many candidates were measured for it (the task scheduler shares the trials unevenly)."""

    name: str
    calls: float
    #: The chosen kernel's time: its record's, or its time taken again once tuning ended
    #: (``confirmed``); inf when the database has no record of it that built and ran.
    seconds: float
    #: The kind of design space the best record comes from: "metaschedule" (one of MetaSchedule's
    #: default spaces HeronSpace added), "heron" (any other) or "" (no record).
    space: str = ""
    trials: int = 0
    #: The least time the kernel can take here: the longer of its
    #: :func:`~ms_heron.hardware.peak.bound_parts`.
    bound_s: float = 0.0
    confirmed: bool = False

    def share_of_bound(self) -> float:
        return share_of_bound(self.bound_s, self.seconds)


#: ``get_top_k`` of this many returns all of a task's records.
_ALL = 1 << 30


def task_times(
    database: ms.Database,
    tasks: Sequence[Task],
    target: Target,
    confirmed: Mapping[str, float] | None = None,
) -> list[TaskTime]:
    """Every task of a lowered model with its call count and the kernel a compiled model runs for it
    (:func:`~ms_heron.records.chosen_record`: the database's best, or the best of those timed again,
    by their ``confirmed`` times)."""
    confirmed = confirmed or {}
    chosen = [chosen_record(database, task.mod, confirmed) for task in tasks]
    parts = [bound_parts(task.mod, target) for task in tasks]
    if any(beats_the_peak(compute_s, s) for (compute_s, _), (_, s) in zip(parts, chosen)):
        # this process's peak probe shared its core: every share of bound would read too high
        measure_peaks_again(target)
        parts = [bound_parts(task.mod, target) for task in tasks]
    return [
        TaskTime(
            name=task.name,
            calls=task.weight,
            seconds=seconds,
            space=_space_kind(record),
            trials=len(top_records(database, task.mod, _ALL)),
            bound_s=max(bound),
            confirmed=record is not None and record_key(record) in confirmed,
        )
        for task, (record, seconds), bound in zip(tasks, chosen, parts)
    ]


def _space_kind(record) -> str:
    if record is None:
        return ""
    return "metaschedule" if is_metaschedule_space(record.trace) else "heron"


def untuned_tasks(database: ms.Database, tasks: Sequence[Task], target: Target) -> list[str]:
    """Tasks without a record that built and ran: they will run their untuned kernel."""
    return [t.name for t in task_times(database, tasks, target) if t.seconds == math.inf]
