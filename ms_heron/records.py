"""MetaSchedule's tuning records in a work dir: the one module that writes and reads them.

A work dir's JSONDatabase is two files of JSON lines, appended as each round ends
(:class:`StoreMeasured`, which also checks that they reached the disk). The database API hands
records back sorted by speed; the files keep the order they were measured in, which progress,
reports and "the best after n trials" need.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir import SBlock
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.target import Target
from tvm.tirx import SeqStmt

from .errors import HeronError
from .hardware.targets import target_json
from .intrinsics import ensure_registered

#: MetaSchedule stores a candidate that failed to build or run with a run time of 1e10 s.
FAILED_RUN_SECS = 1e9
#: A runner result's error for a candidate left unmeasured because the time budget was spent.
NOT_RUN = "ms_heron: not run, the time budget was spent"


class CorruptDatabase(HeronError, ValueError):
    """A database file that cannot be loaded or repaired; the message names the fix."""


#: The two files of MetaSchedule's JSONDatabase in a work dir.
DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def records_file(work_dir: str | Path) -> Path:
    """The file a work dir's tuning records are appended to."""
    return Path(work_dir) / DATABASE_FILES[1]


def appends_to(database: ms.Database, work_dir: str | Path) -> bool:
    """Whether ``database`` is ``work_dir``'s own, appending to its records file."""
    path = getattr(database, "path_tuning_record", None)
    return path is not None and Path(path).resolve() == records_file(work_dir).resolve()


def holds_database(work_dir: str | Path) -> bool:
    """Whether ``work_dir`` holds any file of a MetaSchedule database."""
    return any((Path(work_dir) / name).exists() for name in DATABASE_FILES)


def was_run(result) -> bool:
    """False for a candidate the time budget left unmeasured (:data:`NOT_RUN`)."""
    return result.error_msg != NOT_RUN


@derived_object
class StoreMeasured(PyMeasureCallback):
    """MetaSchedule's ``AddToDatabase`` for candidates that were run: a candidate the budget left
    unmeasured is not stored as a failure, so a resumed run measures it.

    JSONDatabase appends with a C++ stream that fails silently on a full or read-only disk; given
    the ``records_file`` it writes, the round's lines are checked to have landed whole, and an
    ``OSError`` stops tuning instead of measuring on into nothing.
    """

    def __init__(self, database: ms.Database, records_file: Path | None = None):
        super().__init__()
        self.database, self.records_file = database, records_file
        self.failure: OSError | None = None

    def apply(self, task_scheduler, task_id, candidates, _builder_results, runner_results) -> None:
        context = task_scheduler.tasks_[task_id].ctx
        workload = self.database.commit_workload(context.mod)
        before = self._size()
        stored = 0
        for candidate, result in zip(candidates, runner_results):
            if not was_run(result):
                continue
            secs = list(result.run_secs) if result.run_secs is not None else [1e10]
            self.database.commit_tuning_record(
                ms.database.TuningRecord(
                    candidate.sch.trace, workload, secs, context.target, candidate.args_info
                )
            )
            stored += 1
        if stored and self.records_file is not None and not self._landed(before):
            self.failure = OSError(
                errno.ENOSPC,
                "the round's records did not reach the disk (full or read-only?)",
                str(self.records_file),
            )
            raise self.failure

    def _size(self) -> int:
        return (
            self.records_file.stat().st_size
            if self.records_file is not None and self.records_file.exists()
            else 0
        )

    def _landed(self, before: int) -> bool:
        if self._size() <= before:
            return False
        with open(self.records_file, "rb") as records:
            records.seek(-1, os.SEEK_END)
            return records.read(1) == b"\n"


@contextlib.contextmanager
def disk_errors_surface(callbacks: Sequence):
    """Re-raise a :class:`StoreMeasured` disk failure as the ``OSError`` it is: raised inside the
    task scheduler, it comes out of TVM's FFI as a ``RuntimeError``."""
    try:
        yield
    except Exception:
        for callback in callbacks:
            failure = getattr(callback, "failure", None)
            if isinstance(failure, OSError):
                raise failure from None
        raise


def measure_callbacks(database: ms.Database, records_file: Path | None = None) -> list:
    """MetaSchedule's default measure callbacks, storing with :class:`StoreMeasured`."""
    return [
        StoreMeasured(database, records_file),
        ms.measure_callback.RemoveBuildArtifact(),
        ms.measure_callback.UpdateCostModel(),
    ]


def record_seconds(run_secs) -> float:
    """Mean measured seconds of a tuning record's ``run_secs``; inf when it failed to build or
    run."""
    secs = [float(x) for x in run_secs or []]
    return sum(secs) / len(secs) if secs and max(secs) < FAILED_RUN_SECS else math.inf


def result_seconds(result: ms.runner.RunnerResult) -> float:
    """Mean measured seconds of a runner's result, as :func:`record_seconds`; inf when it failed."""
    return record_seconds(result.run_secs) if result.error_msg is None else math.inf


def top_records(database: ms.database.Database, mod, k: int) -> list[ms.database.TuningRecord]:
    """``database``'s ``k`` fastest records of the task ``mod`` (by tuning time); none without its
    workload (a JSONDatabase's ``commit_workload`` would append it to the file)."""
    return (
        list(database.get_top_k(database.commit_workload(mod), k))
        if database.has_workload(mod)
        else []
    )


def fastest_per_workload(database: ms.database.Database) -> list[ms.database.TuningRecord]:
    """The fastest record of each workload ``database`` holds, of those that built and ran."""
    best: dict[str, tuple[float, ms.database.TuningRecord]] = {}
    for record in database.get_all_tuning_records():
        seconds, workload = record_seconds(record.run_secs), record.workload.as_json()[0]
        if seconds < best.get(workload, (math.inf,))[0]:
            best[workload] = (seconds, record)
    return [record for _, record in best.values()]


def commit_copy(database: ms.database.Database, mod, record: ms.database.TuningRecord) -> bool:
    """Commit ``record`` (from another database) to ``database`` as a record of the task ``mod``
    (:func:`record_of`); False, and nothing committed, when its trace does not replay there."""
    copy = record_of(database, mod, record)
    if copy is not None:
        database.commit_tuning_record(copy)
    return copy is not None


def record_of(
    database: ms.database.Database, mod, record: ms.database.TuningRecord
) -> ms.database.TuningRecord | None:
    """``record`` (from another database) as ``database``'s record of the task ``mod``, its trace
    renamed onto the blocks of the workload ``database`` keeps for ``mod`` (:func:`_renamed_trace`);
    None when it does not replay there."""
    workload = database.commit_workload(mod)
    trace = _renamed_trace(record, workload.mod)
    if trace is None:
        return None
    return ms.database.TuningRecord(
        trace, workload, record.run_secs, record.target, record.args_info
    )


def _renamed_trace(record: ms.database.TuningRecord, mod):
    """``record``'s trace, finding its blocks by ``mod``'s names; None if it does not replay there.

    A record matches a task by structure, but its trace finds blocks by name, and Relax names
    blocks and buffers after the model's variables: ResNet-50's global pooling reduces in block
    ``lv378_red``, ResNet-101's in ``lv752_red``. The names of the two kernels are paired in the
    order both share, and each block a trace gets is renamed, with the names derived from one
    (``lv378_global``, a cache stage of buffer ``lv378``)."""
    pairs = list(zip(_kernel_names(record.workload.mod), _kernel_names(mod)))
    renames = {old: new for old, new in pairs if old != new}
    if not renames:
        return record.trace
    if len(dict(pairs)) != len(set(pairs)):
        return None  # a name of one kernel stands for two of the other
    trace_json = record.trace.as_json()  # TVM's own JSON: the record's Python one lacks IndexMaps
    for kind, _, attrs, _ in trace_json[0]:
        if kind == "GetSBlock":
            attrs[0] = _renamed(str(attrs[0]), renames)
    record_json = [trace_json, None, record.target.export(), None]
    try:  # parsing a record replays its trace on the workload
        return ms.database.TuningRecord.from_json(record_json, ms.database.Workload(mod)).trace
    except Exception:  # pylint: disable=broad-except  # TVM raises its own error kinds
        return None


def _renamed(name: str, renames: Mapping[str, str]) -> str:
    if name in renames:
        return renames[name]
    derived = [old for old in renames if name.startswith(old + "_")]
    if not derived:
        return name
    old = max(derived, key=len)
    return renames[old] + name[len(old) :]


def _kernel_names(mod) -> list[str]:
    """Buffer and block names of ``mod``'s kernel, in an order structurally equal kernels share."""
    func = next(iter(mod.functions.values()))
    names = [str(p.name) for p in func.params]  # TVM 0.27: a parameter is its buffer's Var
    stack = [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, SBlock):
            names.append(node.name_hint)
            names.extend(b.name for b in node.alloc_buffers)
        if isinstance(node, SeqStmt):
            stack.extend(reversed(list(node.seq)))
        for attr in ("else_case", "then_case", "init", "body", "block"):
            child = getattr(node, attr, None)
            if child is not None:
                stack.append(child)
    return names


def best_seconds(database: ms.database.Database, mod) -> float:
    """The seconds of ``database``'s fastest record of the task ``mod``; inf without one."""
    top = top_records(database, mod, 1)
    return record_seconds(top[0].run_secs) if top else math.inf


#: A model runs, per task, the fastest of the task's this many fastest records, each timed again
#: when tuning ends (:mod:`ms_heron.tuning.confirm`): the fastest record alone is the one timed in
#: the luckiest moment, and a later record timed in a quiet one displaces a kernel faster on
#: average.
CHOICE_TOP_K = 3

#: Each task's best kernel timed again after model tuning (:mod:`ms_heron.tuning.confirm`), one JSON
#: line per kernel: ``{"record": record_key(...), "seconds": ...}``; the last line of a key holds.
CONFIRMED_FILE = "confirmed.jsonl"


def record_key(record: ms.database.TuningRecord) -> str:
    """Which kernel a record is (its workload and trace), across processes and database copies."""
    trace = hashlib.sha1(str(record.trace).encode()).hexdigest()[:16]
    # the workload's structural hash, as MetaSchedule keeps it
    return f"{record.workload.as_json()[0]}:{trace}"


def chosen_record(
    database: ms.database.Database, mod, confirmed: Mapping[str, float]
) -> tuple[ms.database.TuningRecord | None, float]:
    """The record of task ``mod`` a compiled model runs, and its time: of the task's
    :data:`CHOICE_TOP_K` fastest records, the one with the least time, taking a record's
    ``confirmed`` time (by :func:`record_key`) where it was timed again and its tuning time where
    not (a record newer than the confirmation). ``(None, inf)`` without a record."""
    top = top_records(database, mod, CHOICE_TOP_K)
    timed = [
        (confirmed.get(record_key(r), record_seconds(r.run_secs)), i) for i, r in enumerate(top)
    ]
    seconds, i = min(timed, default=(math.inf, -1))
    return (top[i] if top else None), seconds


def confirmed_seconds(work_dir: str | Path) -> dict[str, float]:
    """The confirmed time of every kernel timed again in ``work_dir``, by :func:`record_key`."""
    return {
        line["record"]: float(line["seconds"])
        for line in json_lines(Path(work_dir) / CONFIRMED_FILE)
    }


def add_confirmed(work_dir: str | Path, seconds: dict[str, float]) -> None:
    """Append confirmed times (by :func:`record_key`), whole lines only, as the records are kept."""
    path = Path(work_dir) / CONFIRMED_FILE
    cut_torn_line(path)
    with open(path, "a", encoding="utf-8") as out:
        out.writelines(
            json.dumps({"record": key, "seconds": s}) + "\n" for key, s in seconds.items()
        )
        out.flush()
        os.fsync(out.fileno())


def cut_torn_line(path: Path) -> None:
    """Drop a last line a killed process left half-written (every complete line ends in a
    newline)."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
            f.flush()
            os.fsync(f.fileno())


def open_database(work_dir: str | Path, target: Target | None = None) -> ms.database.JSONDatabase:
    """The JSONDatabase in ``work_dir``, readable after a killed run (torn last lines are cut,
    corrupt record lines set aside) and with the intrinsics its records name registered (those of
    ``target``, when the records are of that target)."""
    ensure_registered(target)
    for name in DATABASE_FILES:
        cut_torn_line(Path(work_dir) / name)
    set_aside_corrupt_records(Path(work_dir))
    return ms.database.JSONDatabase(work_dir=str(work_dir))


#: Where :func:`set_aside_corrupt_records` keeps the lines it takes out (line number, tab, line).
REJECTED_FILE = "database_tuning_record.rejected"


def set_aside_corrupt_records(work_dir: Path) -> None:
    """Move record lines MetaSchedule cannot load (its loader stops at the first one) to
    :data:`REJECTED_FILE`, with a warning naming each; the good lines stay byte for byte, in order,
    and the file is replaced atomically. A corrupt workload line cannot be set aside (records point
    to workloads by line number): it is refused, naming the line."""
    workloads_file = work_dir / DATABASE_FILES[0]
    # read raw: json_lines would skip a bad one
    workloads = [line for line in _lines(workloads_file) if line.strip()]
    if not all(_is_workload(line) for line in workloads):
        raise CorruptDatabase(
            f"{workloads_file} has a corrupt workload line; its records cannot be loaded: "
            "move the work dir's database files aside and tune again"
        )
    path = work_dir / DATABASE_FILES[1]
    good, bad = [], []
    for number, line in enumerate(_lines(path), 1):
        (good if _is_record(line, len(workloads)) else bad).append((number, line))
    if not bad:
        return
    with open(work_dir / REJECTED_FILE, "a", encoding="utf-8") as rejected:
        rejected.writelines(f"{number}\t{line}" for number, line in bad)
    fresh = path.with_name(path.name + ".tmp")
    with open(fresh, "w", encoding="utf-8") as out:
        out.writelines(line for _, line in good)
        out.flush()
        os.fsync(out.fileno())
    os.replace(fresh, path)
    for number, _ in bad:
        warnings.warn(
            f"{path}:{number} is not a tuning record and was set aside in {REJECTED_FILE}; the "
            "other records are kept",
            stacklevel=3,
        )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True) if path.exists() else []


def _is_workload(line: str) -> bool:
    """A workload line is [structural hash, module JSON]."""
    try:
        workload = json.loads(line)
    except ValueError:
        return False
    return isinstance(workload, list) and len(workload) == 2


def _is_record(line: str, workloads: int) -> bool:
    """A record line is [workload index, [trace, run_secs, target, arg info]]."""
    try:
        index, (_trace, _secs, target, _args) = json.loads(line)
    except (ValueError, TypeError):
        return not line.strip()  # blank lines are harmless
    return isinstance(index, int) and 0 <= index < workloads and isinstance(target, dict)


def json_lines(path: Path) -> list:
    """The JSON lines of ``path``, read without writing it: a torn last line (a killed writer) is
    left out silently, any other line that does not parse is left out with a warning naming it."""
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
            warnings.warn(
                f"{path}:{number} is not a JSON record and is skipped; the other records are kept",
                stacklevel=2,
            )
    return out


def measured_seconds(work_dir: str | Path) -> list[float]:
    """Mean seconds of every record in the order measured (inf: failed)."""
    # A record line is [workload index, [trace, run_secs, target, arg info]].
    return [record_seconds(line[1][1]) for line in json_lines(Path(work_dir) / DATABASE_FILES[1])]


def first_records(
    work_dir: str | Path, count: int | None = None, target: Target | None = None
) -> ms.database.MemoryDatabase:
    """The work dir's database as it stood after its first ``count`` measured records (all when
    None), read without writing a file: what reports use beside a live run, and how one long run
    also answers "what had tuning found after ``count`` trials" (``target``: as in
    :func:`open_database`)."""
    ensure_registered(target)
    work_dir = Path(work_dir)
    workloads = [
        ms.database.Workload.from_json(line) for line in json_lines(work_dir / DATABASE_FILES[0])
    ]
    database = ms.database.MemoryDatabase()
    for workload in workloads:
        database.commit_workload(workload.mod)
    for index, record in json_lines(work_dir / DATABASE_FILES[1])[:count]:
        database.commit_tuning_record(ms.database.TuningRecord.from_json(record, workloads[index]))
    return database


@dataclass
class TargetRecords:
    """A database directory's records of one target (:func:`read_records`)."""

    database: ms.database.MemoryDatabase
    #: Records left out because another target measured them, by that target's description.
    foreign: dict[str, int] = field(default_factory=dict)


def read_records(directory: Path, target: Target) -> TargetRecords:
    """The records of ``directory`` (a work dir, a store's, any JSONDatabase's) measured for
    ``target``, read without writing a file. A line that is not a workload or a record is skipped
    with a warning naming it, the rest kept; a missing directory holds none."""
    ensure_registered(target)
    workloads: list = []  # by line: records point at workloads by line number
    for number, line in _numbered_lines(directory / DATABASE_FILES[0]):
        try:
            workloads.append(ms.database.Workload.from_json(json.loads(line)))
        except Exception:  # pylint: disable=broad-except  # TVM raises its own error kinds
            _skipped(directory / DATABASE_FILES[0], number, "a workload")
            workloads.append(None)
    found = TargetRecords(ms.database.MemoryDatabase())
    wanted = target_key(target_json(target))
    for number, line in _numbered_lines(directory / DATABASE_FILES[1]):
        # A record line is [workload index, [trace, run_secs, target, arg info]].
        try:
            index, record = json.loads(line)
            workload = workloads[index] if isinstance(index, int) and index >= 0 else None
            if workload is not None and target_key(record[2]) != wanted:
                other = describe_target(record[2])
                found.foreign[other] = found.foreign.get(other, 0) + 1
                continue
            parsed = ms.database.TuningRecord.from_json(record, workload)
        except Exception:  # pylint: disable=broad-except
            _skipped(directory / DATABASE_FILES[1], number, "a tuning record")
            continue
        commit_copy(found.database, workload.mod, parsed)
    return found


def _numbered_lines(path: Path) -> list[tuple[int, str]]:
    """The complete lines of ``path`` with their numbers, blank ones left out: a torn last line (a
    killed writer) is not complete."""
    lines = _lines(path)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    return [(number, line) for number, line in enumerate(lines, 1) if line.strip()]


def _skipped(path: Path, number: int, what: str) -> None:
    warnings.warn(
        f"{path}:{number} is not {what} and is skipped; the other records are kept", stacklevel=3
    )


@dataclass
class Merged:
    """What :func:`merge_records` did."""

    added: int = 0
    already_there: int = 0
    #: Records measured for another target, by that target's description.
    foreign: dict[str, int] = field(default_factory=dict)


def target_key(target: dict) -> str:
    """A target as stored in a record or run file, comparable across files (keys sorted)."""
    return json.dumps(target, sort_keys=True)


def describe_target(target: dict) -> str:
    """A stored target in a few words: kind, CPU or GPU arch, cores."""
    words = [target.get("kind", "?"), target.get("mcpu") or target.get("arch") or ""]
    if "num-cores" in target:
        words.append(f"num-cores={target['num-cores']}")
    return " ".join(w for w in words if w)


def merge_records(sources: list[Path], dest: str | Path, target: dict) -> Merged:
    """Append to ``dest``'s database every record of ``sources`` measured for ``target`` and not yet
    in ``dest``. Sources are read without writing them; their records keep their measured order."""
    dest = Path(dest)
    merged = Merged()
    database = open_database(dest)  # first: it sets aside the lines of dest that are not records
    seen = set()
    dest_workloads = json_lines(dest / DATABASE_FILES[0])
    for index, record in json_lines(dest / DATABASE_FILES[1]):
        seen.add((dest_workloads[index][0], json.dumps(record[0])))
    wanted = target_key(target)
    for source in sources:
        workloads = json_lines(Path(source) / DATABASE_FILES[0])
        for index, record in json_lines(Path(source) / DATABASE_FILES[1]):
            # A record line is [workload index, [trace, run_secs, target, arg info]].
            if target_key(record[2]) != wanted:
                other = describe_target(record[2])
                merged.foreign[other] = merged.foreign.get(other, 0) + 1
                continue
            key = (workloads[index][0], json.dumps(record[0]))
            if key in seen:
                merged.already_there += 1
                continue
            seen.add(key)
            workload = database.commit_workload(
                ms.database.Workload.from_json(workloads[index]).mod
            )
            database.commit_tuning_record(ms.database.TuningRecord.from_json(record, workload))
            merged.added += 1
    return merged
