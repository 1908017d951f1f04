"""The records store: each task's best programs kept per target beyond the run that found them.

Every run starts from nothing otherwise: a second network that shares most of its kernels with one
tuned before (ResNet-101 after ResNet-50) would tune them again. The store is a directory with one
MetaSchedule JSONDatabase per target (so stock MetaSchedule reads it too), by default under the
user's cache directory. A run seeds its work dir with the store's best programs of its tasks (and
those of any other work dir or store the user names), tunes only the tasks found nowhere, times the
seeded programs again on this host with the rest of its best kernels (:mod:`.confirm`), and adds
its own best programs to the store when it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from .. import __version__
from ..hardware.targets import target_json
from ..records import (
    CHOICE_TOP_K,
    describe_target,
    fastest_per_workload,
    open_database,
    read_records,
    record_key,
    record_of,
    record_seconds,
    target_key,
    top_records,
)
from ..relax.tasks import Task

#: Overrides the store's default place (tests point it at a temporary directory).
STORE_ENV = "MS_HERON_STORE"
#: Programs the store keeps per task: as many as a model run times again to choose its kernel.
KEPT_PER_TASK = CHOICE_TOP_K
#: ``get_top_k``'s k for every record of a task.
_ALL = 1 << 30


def default_store_dir() -> Path:
    """``$MS_HERON_STORE``, else ``ms_heron/records`` under ``$XDG_CACHE_HOME`` (``~/.cache``)."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "ms_heron" / "records"


@dataclass(kw_only=True)
class Seeded:
    """What seeding a work dir found."""

    #: Names of the tasks some source held a valid program of.
    tasks: set[str] = field(default_factory=set)
    #: Programs added to the work dir (the ones it held already are not counted).
    added: int = 0
    #: Records left out because another target measured them, by source and that target.
    foreign: dict[tuple[str, str], int] = field(default_factory=dict)
    #: The fastest program of every workload the sources hold, of the run's tasks or not: the
    #: tasks tuned start from them, projected onto their shapes (``HeronSearch.donors``).
    donors: list[ms.database.TuningRecord] = field(default_factory=list)

    def lines(self, total_tasks: int) -> list[str]:
        """What a user is told, one line each."""
        out = [
            f"skipped {count} records of {source} measured for another target ({other})"
            for (source, other), count in sorted(self.foreign.items())
        ]
        if self.tasks:
            out.append(
                f"{len(self.tasks)} of {total_tasks} tasks were tuned before for this target: "
                "their best programs are timed again here, not tuned (--retune tunes them)"
            )
        return out


class RecordStore:
    """One directory of tuned programs, a JSONDatabase per target.

    Parameters
    ----------
    root
        The store's directory (:func:`default_store_dir` when None); created on first write.
    """

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_store_dir()

    def dir_for(self, target: Target) -> Path:
        """The target's database: named for a reader, keyed by the whole target and the TVM and
        ms_heron versions (a trace of another version may not replay, and a task whose stored
        programs fail is not tuned)."""
        exported = target_json(target)
        words = describe_target(exported).replace(" ", "_").replace("=", "")
        key = f"{target_key(exported)} tvm {tvm.__version__} ms_heron {__version__}"
        return self.root / f"{words}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"

    def keep(self, database: ms.Database, tasks: Sequence[Task], target: Target) -> int:
        """Add each task's :data:`KEPT_PER_TASK` fastest valid programs of ``database`` to the store
        (those it holds already are skipped); returns how many were added. One writer at a time:
        MetaSchedule's records point at workloads by line number."""
        directory = self.dir_for(target)
        with _store_lock(directory):
            store = open_database(directory, target)
            return sum(_copy(_best_valid(database, task.mod), store, task.mod)[1] for task in tasks)


def seed_from(
    database: ms.Database,
    tasks: Sequence[Task],
    target: Target,
    sources: Sequence[str | Path],
) -> Seeded:
    """Add to ``database`` (a run's) the :data:`KEPT_PER_TASK` fastest valid programs of each task
    that ``sources`` (stores' target directories, work dirs, MetaSchedule database directories)
    hold for ``target``, and collect every workload's fastest program as a donor for the tasks
    tuned. A source's corrupt line is skipped with a warning naming it; a record of another target
    is counted, never used."""
    seeded = Seeded()
    for source in sources:
        found = read_records(Path(source), target)
        for other, count in found.foreign.items():
            key = (str(source), other)
            seeded.foreign[key] = seeded.foreign.get(key, 0) + count
        seeded.donors.extend(fastest_per_workload(found.database))
        for task in tasks:
            usable, added = _copy(_best_valid(found.database, task.mod), database, task.mod)
            if usable:
                seeded.tasks.add(task.name)
            seeded.added += added
    return seeded


def _best_valid(database: ms.Database, mod) -> list[ms.database.TuningRecord]:
    """The task's :data:`KEPT_PER_TASK` fastest records that built and ran."""
    return [
        r
        for r in top_records(database, mod, KEPT_PER_TASK)
        if record_seconds(r.run_secs) < math.inf
    ]


def _copy(records: Sequence[ms.database.TuningRecord], into: ms.Database, mod) -> tuple[int, int]:
    """Commit ``records`` of the task ``mod`` to ``into``, but the ones it holds already; returns
    how many of them ``into`` now holds and how many were added. A record whose trace does not
    replay on ``into``'s kernel of ``mod`` is left out (:func:`~ms_heron.records.record_of`)."""
    held = {record_key(r) for r in top_records(into, mod, _ALL)} if records else set()
    usable = added = 0
    for record in records:
        copy = record_of(into, mod, record)
        if copy is None:
            continue
        usable += 1
        if record_key(copy) not in held:
            into.commit_tuning_record(copy)
            held.add(record_key(copy))
            added += 1
    return usable, added


@contextlib.contextmanager
def _store_lock(directory: Path) -> Iterator[None]:
    """Wait for the store's other writer, if any (the OS drops the lock of a killed one)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "ms_heron_store.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
