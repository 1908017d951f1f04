"""A work dir's own files: the run file (:class:`RunSpec`, what is tuned), the lock of the process
tuning it, the progress log (:class:`Progress`, one line per round) and the merge of work dirs.

Layout of a work dir (MetaSchedule's own files plus ours)::

    ms_heron_run.json              what is tuned: workload, kernel or model; dtype, target, seed,
                                     the TVM and ms_heron versions
    database_workload.json         MetaSchedule's JSONDatabase, one record per line,
    database_tuning_record.json      appended as each round ends
    relax_model_<sha>.json         a Relax model run's module, weights bound
    progress.jsonl                 one line per measured round: trials, best, valid, elapsed (a
                                     model's best is its estimated latency; the round's task is
                                     named), and a model run's last line, once its best kernels were
                                     timed again
    confirmed.jsonl                a model's best kernels timed again after tuning (:mod:`.confirm`)
    seeded.json                    the tasks whose programs came from the records store
                                     (:mod:`.store`), not tuned here
    logs/                          MetaSchedule's per-task logs (HeronSearch's round statistics)
    ms_heron.lock                  held by the tuning process (its pid inside); a second one is
    refused baseline/                      the same layout for MetaSchedule's default search, if
    asked for

Everything is appended line by line, so a run killed at any point loses at most the round in
flight: on resume a torn last line is cut off.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import IRModule
from tvm.target import Target

from .. import __version__, workloads
from ..errors import HeronError
from ..hardware.peak import flops_per_byte
from ..hardware.targets import target_json
from ..records import Merged, cut_torn_line, holds_database, json_lines, merge_records, records_file
from ..relax import bind_params
from ..workloads import KERNEL, Workload, from_func

#: The family of a model run (its tasks are the model's fused kernels).
MODEL = "model"
RUN_FILE = "ms_heron_run.json"
#: Held by the process that tunes the work dir.
LOCK_FILE = "ms_heron.lock"
PROGRESS_FILE = "progress.jsonl"
SEEDED_FILE = "seeded.json"
#: A Relax model run keeps its module in the work dir, as ``relax_model_<sha256 prefix>.json``.
RELAX_FILE_PREFIX = "relax_model_"
BASELINE_DIR = "baseline"


class RunError(HeronError, ValueError):
    """A work dir that cannot hold this run; the message names the fix."""


@dataclass(kw_only=True, frozen=True)
class RunSpec:
    """What a work dir tunes, as stored in its run file: enough to rebuild the task(s) alone."""

    family: str
    shape: dict
    dtype: str
    target: dict
    seed: int = 0
    #: A user's kernel: its TVMScript (the work dir then needs no other file) and its name.
    kernel: str = ""
    label: str = ""
    #: A suite workload with 7-bit weights (:func:`ms_heron.workloads.make`'s ``narrow_weights``).
    narrow_weights: bool = False
    #: An ONNX model: its path, the SHA-256 of its bytes, and static shapes for symbolic inputs.
    model: str = ""
    model_sha256: str = ""
    input_shapes: dict = field(default_factory=dict)
    #: A model tuned with exact exp/erf/tanh instead of TVM's fast approximations (its tasks
    #: differ).
    exact_math: bool = False
    #: The host's peak flops per byte of memory bandwidth when a model run began
    #: (:func:`~ms_heron.hardware.peak.flops_per_byte`): it picks each 3x3 convolution's Winograd
    #: form, so a later process lowers the model to the same tasks. None (a run that began before
    #: it was kept, or on a target that does not run here): F(2x2, 3x3) everywhere.
    flops_per_byte: float | None = None
    #: Which TVM and ms_heron wrote the run (records of other versions may replay differently).
    versions: dict = field(
        default_factory=lambda: {"tvm": tvm.__version__, "ms_heron": __version__}
    )

    @staticmethod
    def of(workload: Workload, target: Target, seed: int) -> RunSpec:
        kernel = workload.func.script() if workload.family == KERNEL else ""
        return RunSpec(
            family=workload.family,
            shape=dict(workload.shape),
            dtype=workload.dtype,
            target=target_json(target),
            seed=seed,
            kernel=kernel,
            label=workload.label,
            narrow_weights=workload.narrow_weights,
        )

    @staticmethod
    def of_model(
        path: str | Path,
        input_shapes: Mapping[str, Sequence[int]],
        target: Target,
        seed: int,
        *,
        exact_math: bool = False,
    ) -> RunSpec:
        path = Path(path).resolve()
        shapes = {name: [int(d) for d in dims] for name, dims in input_shapes.items()}
        return RunSpec._of_a_model(
            target,
            seed,
            label=path.stem,
            model=str(path),
            model_sha256=file_sha256(path),
            input_shapes=shapes,
            exact_math=exact_math,
        )

    @staticmethod
    def of_relax(
        mod: IRModule,
        params: Mapping[str, Any] | None,
        work_dir: str | Path,
        target: Target,
        seed: int,
        *,
        label: str = "relax_model",
        exact_math: bool = False,
    ) -> RunSpec:
        """A Relax module (``params`` bound as its weights), kept in ``work_dir`` as TVM's JSON
        under a name made from its SHA-256, so the work dir alone carries the run and no other model
        is overwritten."""
        text = tvm.ir.save_json(bind_params(mod, params))
        digest = hashlib.sha256(text.encode()).hexdigest()
        name = f"{RELAX_FILE_PREFIX}{digest[:16]}.json"
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        if not (Path(work_dir) / name).exists():
            (Path(work_dir) / name).write_text(text)
        return RunSpec._of_a_model(
            target, seed, label=label, model=name, model_sha256=digest, exact_math=exact_math
        )

    @staticmethod
    def _of_a_model(target: Target, seed: int, **fields: Any) -> RunSpec:
        """A model run: its tasks are the model's, no kernel family, shape or dtype of its own."""
        balance = flops_per_byte(target)
        return RunSpec(
            family=MODEL,
            shape={},
            dtype="",
            target=target_json(target),
            seed=seed,
            flops_per_byte=balance if math.isfinite(balance) else None,
            **fields,
        )

    def workload(self) -> Workload:
        if self.kernel:
            return from_func(tvm.script.from_source(self.kernel), self.label)
        return workloads.make(
            self.family,
            self.dtype,
            target=Target(self.target),
            narrow_weights=self.narrow_weights,
            **self.shape,
        )

    def same_task(self, other: RunSpec) -> bool:
        def key(spec: RunSpec) -> tuple:
            return (
                spec.family,
                spec.shape,
                spec.dtype,
                spec.kernel,
                spec.narrow_weights,
                spec.model_sha256,
                spec.input_shapes,
                spec.exact_math,
            )

        return key(self) == key(other)

    def describe(self) -> str:
        if self.model:
            name = self.label if self.model.startswith(RELAX_FILE_PREFIX) else Path(self.model).name
            return f"model {name}" + (" (exact math)" if self.exact_math else "")
        if self.kernel:
            return f"kernel {self.label} ({self.dtype})"
        dims = " ".join(f"{k}={v}" for k, v in self.shape.items())
        narrow = " (7-bit weights)" if self.narrow_weights else ""
        return f"{self.family} {dims} {self.dtype}{narrow}"


@dataclass(kw_only=True)
class Progress:
    """The state after a measured round, as written to ``progress.jsonl``."""

    trials: int
    valid: int
    # inf until a candidate is valid; a model's estimated latency (inf until every task ran)
    best_seconds: float
    elapsed_s: float  # wall-clock tuning time, summed over resumed runs
    #: A model run: the task this round measured, and that task's best kernel so far.
    task: str = ""
    task_seconds: float = math.inf
    #: Mean search work per round so far in this process (generating candidates and taking in
    #: results, not building or measuring; :class:`~ms_heron.tuning.budget.WatchedSearch` times it).
    search_s_per_round: float = 0.0
    #: A model run's last line: the estimate from its best kernels timed again (:mod:`.confirm`).
    confirmed: bool = False

    def best_gops(self, ops: float) -> float:
        return ops / self.best_seconds / 1e9 if self.best_seconds < math.inf else 0.0


def claim(work_dir: Path, spec: RunSpec) -> RunSpec:
    """The run ``work_dir`` holds for ``spec``: its run file's (a resumed run goes on as it started:
    seed, model path), or ``spec``'s, written now; refused when the work dir holds another run, a
    run for another target, or a database ms-heron did not write, or cannot be written."""
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        probe = work_dir / ".ms_heron_write_test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise RunError(
            f"cannot write to work dir {work_dir} ({err.strerror}); choose a writable --work-dir"
        ) from err
    run_file = work_dir / RUN_FILE
    if run_file.exists():
        held = _read_spec(run_file)
        if not held.same_task(spec):
            raise RunError(
                f"work dir {work_dir} holds a run of {held.describe()}, not {spec.describe()}; "
                "use another --work-dir, or the same workload to resume it"
            )
        if held.target != spec.target:
            raise RunError(
                f"work dir {work_dir} holds records measured for target {json.dumps(held.target)}, "
                f"not {json.dumps(spec.target)}; timings on one target do not rank kernels for "
                "another: tune into another --work-dir (or resume with the run's own target)"
            )
        return held
    if holds_database(work_dir):
        raise RunError(
            f"work dir {work_dir} holds a MetaSchedule database not made by ms-heron; use another "
            "--work-dir"
        )
    _write_spec(work_dir, spec)
    return spec


def read_spec(work_dir: Path) -> RunSpec:
    """The run ``work_dir`` holds; refused, with the command that makes one, when it holds none."""
    run_file = work_dir / RUN_FILE
    if not run_file.exists():
        raise RunError(
            f"{work_dir} holds no ms-heron run ({RUN_FILE} is missing); tune into it first: "
            f"ms-heron tune ... --work-dir {work_dir}"
        )
    return _read_spec(run_file)


def read_progress(work_dir: Path) -> list[Progress]:
    """Every line of the progress log, oldest first."""
    return [
        Progress(
            trials=r["trials"],
            valid=r["valid"],
            best_seconds=float(r["best_seconds"]),
            elapsed_s=r["elapsed_s"],
            task=r.get("task", ""),
            task_seconds=float(r.get("task_seconds", math.inf)),
            search_s_per_round=r.get("search_s_per_round", 0.0),
            confirmed=r.get("confirmed", False),
        )
        for r in json_lines(work_dir / PROGRESS_FILE)
    ]


def log_progress(work_dir: Path, progress: Progress) -> None:
    """Append one round's line to the progress log."""
    with open(work_dir / PROGRESS_FILE, "a") as log:
        log.write(json.dumps(asdict(progress)) + "\n")


def seeded_tasks(work_dir: Path) -> set[str]:
    """The work dir's tasks whose programs came from the records store (:data:`SEEDED_FILE`)."""
    path = work_dir / SEEDED_FILE
    return set(json.loads(path.read_text())) if path.is_file() else set()


def note_seeded(work_dir: Path, tasks: set[str]) -> None:
    """Write :data:`SEEDED_FILE` whole (a new file moved over the old one)."""
    fresh = work_dir / (SEEDED_FILE + ".tmp")
    fresh.write_text(json.dumps(sorted(tasks)))
    os.replace(fresh, work_dir / SEEDED_FILE)


@contextlib.contextmanager
def work_dir_lock(work_dir: Path) -> Iterator[None]:
    """Hold ``work_dir``'s lock (an OS file lock with the holder's pid in the file). The OS drops it
    when the holder exits, however it dies, so a killed run never leaves a stale lock behind. The
    progress log's torn last line, if a holder was killed mid-write, is cut off before this one
    appends."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with open(work_dir / LOCK_FILE, "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise RunError(
                f"work dir {work_dir} is being tuned by process {holder}; wait for it to finish, "
                "or tune into another --work-dir (report and show may read it meanwhile)"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        cut_torn_line(work_dir / PROGRESS_FILE)
        try:
            yield
        finally:
            lock.truncate(0)


def merge_runs(
    sources: Sequence[str | Path], dest: str | Path, target: Target | None = None
) -> Merged:
    """Add to ``dest`` every record of ``sources`` (work dirs or MetaSchedule database dirs) that
    was measured for ``dest``'s target and is not there yet; ``dest`` becomes a run of the first
    source's run file when it has none. The target is ``dest``'s, else ``target``, else the first
    source's."""
    dest = Path(dest)
    sources = [Path(s) for s in sources]
    for source in sources:
        if not records_file(source).is_file():
            raise RunError(
                f"{source} holds no tuning records ({records_file(source).name} is missing); name "
                "work dirs of ms-heron runs"
            )
        if source.resolve() == dest.resolve():
            raise RunError(f"{source} is the destination; name it once, last")
    specs = {s: _read_spec(s / RUN_FILE) for s in [dest, *sources] if (s / RUN_FILE).is_file()}
    if dest in specs:
        held = specs[dest].target
    elif target is not None:
        held = target_json(target)
    elif specs:
        held = next(iter(specs.values())).target
    else:
        raise RunError(
            "none of the work dirs has an ms-heron run file to take the target from; name it with "
            "--target"
        )
    with work_dir_lock(dest):
        if dest not in specs:
            spec = next((s for s in specs.values() if s.target == held), None)
            if spec is not None:
                _write_spec(dest, spec)
        return merge_records(sources, dest, held)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks (a model file may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_spec(run_file: Path) -> RunSpec:
    try:
        fields = json.loads(run_file.read_text())
        if fields.get("model") and "exact_math" not in fields:
            fields["exact_math"] = True  # written before model lowering approximated exp/erf/tanh
        return RunSpec(**fields)
    except (ValueError, TypeError, AttributeError) as err:
        raise RunError(
            f"{run_file} is not an ms-heron run file ({err}); use another --work-dir"
        ) from err


def _write_spec(work_dir: Path, spec: RunSpec) -> None:
    (work_dir / RUN_FILE).write_text(json.dumps(asdict(spec), indent=1) + "\n")
