"""Each task's fastest records timed once more when model tuning ends: the kernel choice and the
model estimate without the winner's curse.

A task's best record is the fastest of its many measurements, and every measurement is off by the
host's noise, so the fastest is biased fast: the search keeps the candidates that were timed in a
quiet moment. On a shared 2-core Xeon whose speed swings by 1.5x within seconds, a ResNet-50 whose
database measured 44.4 ms after 10 of its 15 minutes measured 49.3 ms at the end, with a lower
estimate, as records timed in quiet moments displaced kernels faster on average. Timed again
together after the search chose them, by the run's own builder and runner, the
:data:`~ms_heron.records.CHOICE_TOP_K` fastest records of each task are no longer selected for luck,
and the model runs the fastest of them (:func:`chosen_database`).

The times are kept in :data:`~ms_heron.records.CONFIRMED_FILE` by record (workload and trace), so
a later, faster record of the task counts with its tuning time until it is confirmed in turn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..hardware.targets import is_cpu
from ..records import (
    CHOICE_TOP_K,
    add_confirmed,
    chosen_record,
    commit_copy,
    confirmed_seconds,
    record_key,
    record_seconds,
    top_records,
)
from ..relax.tasks import Task
from .builder import remove_artifact


def confirm_best(
    work_dir: str,
    database: ms.Database,
    tasks: Sequence[Task],
    target: Target,
    *,
    builder: ms.builder.Builder,
    runner: ms.runner.Runner,
) -> None:
    """Build and time again, in one batch, each task's :data:`~ms_heron.records.CHOICE_TOP_K`
    fastest records not confirmed yet.

    A kernel that fails to build or run now keeps its record's time (and is tried again next run).
    """
    done = confirmed_seconds(work_dir)
    todo = {}  # record key -> the record's candidate (schedule and arguments)
    for task in tasks:
        for record in top_records(database, task.mod, CHOICE_TOP_K):
            if record_seconds(record.run_secs) < math.inf and record_key(record) not in done:
                todo[record_key(record)] = record.as_measure_candidate()
    if not todo:
        return
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in todo.values()])
    device = "cpu" if is_cpu(target) else target.kind.name
    ready = [(key, b) for key, b in zip(todo, built) if b.error_msg is None]
    inputs = [
        ms.runner.RunnerInput(b.artifact_path, device, todo[key].args_info) for key, b in ready
    ]
    seconds = {}
    for (key, _), future in zip(ready, runner.run(inputs)):
        result = future.result()
        if result.error_msg is None:
            seconds[key] = record_seconds(result.run_secs)
    add_confirmed(work_dir, seconds)
    for _, b in ready:
        remove_artifact(b)


def chosen_database(
    database: ms.Database, tasks: Sequence[Task], confirmed: Mapping[str, float]
) -> ms.database.MemoryDatabase:
    """``database`` cut to the kernel a compiled model runs for each task
    (:func:`~ms_heron.records.chosen_record`), for MetaSchedule's apply-database pass, which takes
    each task's fastest record by its tuning time."""
    chosen = ms.database.MemoryDatabase()
    for task in tasks:
        mod = task.mod
        record, _ = chosen_record(database, mod, confirmed)
        if record is not None:
            commit_copy(chosen, mod, record)
    return chosen
