"""MetaSchedule's tuning records in a work dir: one leaf module every layer reads them through.

A work dir's JSONDatabase is two files of JSON lines, appended as each round ends. The database API
hands records back sorted by speed; the files keep the order they were measured in, which progress,
reports and "the best after n trials" need.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from tvm.s_tir import meta_schedule as ms

from .intrinsics import ensure_registered

#: MetaSchedule stores a candidate that failed to build or run with a run time of 1e10 s.
FAILED_RUN_SECS = 1e9

#: The two files of MetaSchedule's JSONDatabase in a work dir.
DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def record_seconds(run_secs) -> float:
    """Mean measured seconds of a tuning record's ``run_secs``; inf when it failed to build or run."""
    secs = [float(x) for x in run_secs or []]
    return sum(secs) / len(secs) if secs and max(secs) < FAILED_RUN_SECS else float("inf")


def cut_torn_line(path: Path) -> None:
    """Drop a last line a killed process left half-written (every complete line ends in a newline)."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())


def open_database(work_dir: str | Path) -> ms.database.JSONDatabase:
    """The JSONDatabase in ``work_dir``, readable after a killed run (torn last lines are cut)
    and with the intrinsics its records name registered."""
    ensure_registered()
    for name in DATABASE_FILES:
        cut_torn_line(Path(work_dir) / name)
    return ms.database.JSONDatabase(work_dir=str(work_dir))


def json_lines(path: Path) -> list:
    """The JSON lines of ``path``, read without writing it: a torn last line (a killed writer) is left
    out silently, any other line that does not parse is left out with a warning naming it."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # torn: no newline yet
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            warnings.warn(f"{path}:{number} is not a JSON record and is skipped; the other records are kept", stacklevel=2)
    return out


def measured_seconds(work_dir: str | Path) -> list[float]:
    """Mean seconds of every record in the order measured (inf: failed)."""
    # A record line is [workload index, [trace, run_secs, target, arg info]].
    return [record_seconds(line[1][1]) for line in json_lines(Path(work_dir) / DATABASE_FILES[1])]


def first_records(work_dir: str | Path, count: int | None = None) -> ms.database.MemoryDatabase:
    """The work dir's database as it stood after its first ``count`` measured records (all when
    None), read without writing a file: what reports use beside a live run, and how one long run
    also answers "what had tuning found after ``count`` trials"."""
    ensure_registered()
    work_dir = Path(work_dir)
    workloads = [ms.database.Workload.from_json(line) for line in json_lines(work_dir / DATABASE_FILES[0])]
    database = ms.database.MemoryDatabase()
    for workload in workloads:
        database.commit_workload(workload.mod)
    for index, record in json_lines(work_dir / DATABASE_FILES[1])[:count]:
        database.commit_tuning_record(ms.database.TuningRecord.from_json(record, workloads[index]))
    return database
