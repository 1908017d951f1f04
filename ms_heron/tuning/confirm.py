"""Each task's best kernel timed once more when model tuning ends: the model estimate without the
winner's curse.

A task's best record is the fastest of its many measurements, and every measurement is off by the
host's noise, so the fastest is biased fast: the search keeps the candidates that were timed in a
quiet moment. On a shared 2-core Xeon whose speed swings by 1.5x within seconds, BERT-base int8's
best records summed to 0.62 of the measured model, for MetaSchedule's default search and Heron's
alike, while the same kernels timed again summed to 0.96-1.10 of it. Timed once more after the
search chose them, by the run's own builder and runner, the kernels are no longer selected for luck.

The times are kept in :data:`~ms_heron.records.CONFIRMED_FILE` by record (workload and trace), so
a later, faster record of the task counts until it is confirmed in turn.
"""

from __future__ import annotations

import math
import os
import shutil

from tvm import IRModule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from ..hardware.targets import is_cpu
from ..records import add_confirmed, confirmed_seconds, record_key, record_seconds
from ..relax.tasks import extract_tasks


def confirm_best(
    work_dir: str,
    database: ms.Database,
    lowered: IRModule,
    target: Target,
    *,
    builder: ms.builder.Builder,
    runner: ms.runner.Runner,
) -> None:
    """Build and time again every task's best record not confirmed yet.

    A kernel that fails to build or run now keeps its record's time (and is tried again next run).
    """
    done = confirmed_seconds(work_dir)
    todo = {}  # record key -> the task's best kernel, replayed
    for task in extract_tasks(lowered, target):
        mod = task.dispatched[0]
        top = database.get_top_k(database.commit_workload(mod), 1) if database.has_workload(mod) else []
        if top and record_seconds(top[0].run_secs) < math.inf and record_key(top[0]) not in done:
            todo[record_key(top[0])] = database.query_schedule(mod, target, "main")
    if not todo:
        return
    built = builder.build([ms.builder.BuilderInput(sch.mod, target) for sch in todo.values()])
    device = "cpu" if is_cpu(target) else target.kind.name
    ready = [(key, sch, b) for (key, sch), b in zip(todo.items(), built) if b.error_msg is None]
    inputs = [
        ms.runner.RunnerInput(b.artifact_path, device, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
        for _, sch, b in ready
    ]
    seconds = {}
    for (key, _, _), future in zip(ready, runner.run(inputs)):
        result = future.result()
        if result.error_msg is None:
            seconds[key] = record_seconds(result.run_secs)
    add_confirmed(work_dir, seconds)
    for _, _, b in ready:  # as MetaSchedule's RemoveBuildArtifact does after a round
        shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
