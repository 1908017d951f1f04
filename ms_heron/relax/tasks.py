"""A lowered model's tasks as the tuner and the reports see them: calls per model run, best kernel so
far, trials, and the least time each can take here (its bound), as rows and as a markdown table."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tvm import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..hardware.peak import bound_seconds, share_of_bound
from ..records import chosen_record, record_key, top_records
from ..schedule.annotations import is_metaschedule_space


def extract_tasks(lowered: IRModule, target: Target) -> list[ms.ExtractedTask]:
    """The tuning tasks of a lowered model (one per distinct fused TIR function)."""
    return list(ms.relax_integration.extract_tasks(lowered, target))


@dataclass(frozen=True)
class TaskTime:
    """One fused kernel of a model: how often the model calls it, its best measured time and how many
    candidates were measured for it (the task scheduler shares the trials unevenly)."""

    name: str
    calls: float
    #: The chosen kernel's time: its record's, or its time taken again once tuning ended
    #: (``confirmed``); inf when the database has no record of it that built and ran.
    seconds: float
    #: The kind of design space the best record comes from: "metaschedule" (one of MetaSchedule's
    #: default spaces HeronSpace added), "heron" (any other) or "" (no record).
    space: str = ""
    trials: int = 0
    #: The least time the kernel can take here (:func:`~ms_heron.hardware.peak.bound_seconds`).
    bound_s: float = 0.0
    confirmed: bool = False

    def share_of_bound(self) -> float:
        return share_of_bound(self.bound_s, self.seconds)


#: ``get_top_k`` of this many returns all of a task's records.
_ALL = 1 << 30


def task_times(
    database: ms.Database, lowered: IRModule, target: Target, confirmed: Mapping[str, float] | None = None
) -> list[TaskTime]:
    """Every task of a lowered model with its call count and the kernel a compiled model runs for it
    (:func:`~ms_heron.records.chosen_record`: the database's best, or the best of those timed again,
    by their ``confirmed`` times)."""
    confirmed = confirmed or {}
    out = []
    for task in extract_tasks(lowered, target):
        mod = task.dispatched[0]
        record, seconds = chosen_record(database, mod, confirmed)
        out.append(
            TaskTime(
                task.task_name,
                float(task.weight),
                seconds,
                _space_kind(record),
                len(top_records(database, mod, _ALL)),
                bound_seconds(mod, target),
                record is not None and record_key(record) in confirmed,
            )
        )
    return out


def _space_kind(record) -> str:
    if record is None:
        return ""
    return "metaschedule" if is_metaschedule_space(record.trace) else "heron"


def task_table(arms: Mapping[str, list[TaskTime]]) -> list[str]:
    """Markdown table, one row per task: each arm's best kernel, the task's calls and its share of the
    model's estimated latency (sum of kernel x calls) and its trials in each arm; ratios against the first arm."""
    names = list(arms)
    first = arms[names[0]]
    totals = {arm: sum(t.calls * t.seconds for t in times) for arm, times in arms.items()}
    head = "| task | calls | bound ms | " + " | ".join(f"{a} ms | {a} share | {a} trials | {a} of bound" for a in names)
    head += "".join(f" | {names[0]} speed-up over {a}" for a in names[1:]) + f" | {names[0]} best from |"
    lines = [head, "|" + "---|" * (4 + 4 * len(names) + len(names) - 1)]
    rows = []
    for i, task in enumerate(first):
        cells = [task.name, f"{task.calls:g}", f"{task.bound_s * 1e3:.4f}"]
        for arm in names:
            t = arms[arm][i]
            cells += [
                f"{t.seconds * 1e3:.4f}",
                f"{t.calls * t.seconds / totals[arm]:.0%}" if totals[arm] < math.inf else "?",
                str(t.trials),
                f"{t.share_of_bound():.0%}",
            ]
        cells += [_speedup(arms[a][i].seconds, task.seconds) for a in names[1:]]
        cells.append(f"{task.space} space" if task.space else "-")
        rows.append((-task.calls * task.seconds, "| " + " | ".join(cells) + " |"))
    lines += [row for _, row in sorted(rows, key=lambda r: r[0])]
    bound = sum(t.calls * t.bound_s for t in first)
    total = ["**model estimate**", "", f"{bound * 1e3:.4f}"]
    total += [
        c
        for a in names
        for c in (f"{totals[a] * 1e3:.4f}", "", str(sum(t.trials for t in arms[a])), f"{bound / totals[a]:.0%}")
    ]
    total += [_speedup(totals[a], totals[names[0]]) for a in names[1:]] + [""]
    return lines + ["| " + " | ".join(total) + " |"]


def timing_note(arms: Mapping[str, list[TaskTime]]) -> str:
    """How each arm's kernel times were taken, for a task table's heading (runs from before
    :mod:`ms_heron.tuning.confirm` existed hold their best records' times)."""
    how = {
        arm: "timed again after tuning" if any(t.confirmed for t in times) else "best record while tuning"
        for arm, times in arms.items()
    }
    if len(set(how.values())) == 1:
        return next(iter(how.values()))
    return "; ".join(f"{arm}: {note}" for arm, note in how.items())


def _speedup(theirs: float, ours: float) -> str:
    return f"{theirs / ours:.2f}x" if 0 < ours < math.inf and theirs < math.inf else "n/a"


def untuned_tasks(database: ms.Database, lowered: IRModule, target: Target) -> list[str]:
    """Tasks without a record that built and ran: they will run their untuned kernel."""
    return [t.name for t in task_times(database, lowered, target) if t.seconds == math.inf]
