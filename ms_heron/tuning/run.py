"""A tuning run in a work directory: what it tunes, its records and its progress, resumable.

What it tunes is one task source: a suite workload, a user's kernel (its TVMScript is kept in the
run file), an ONNX model (its path and SHA-256) or a Relax module (kept in the work dir as TVM's
JSON); every fused kernel of a model is a task.
Layout of a work dir (MetaSchedule's own files plus ours)::

    ms_heron_run.json              what is tuned: workload, kernel or model; dtype, target, seed,
                                     the TVM and ms_heron versions
    database_workload.json         MetaSchedule's JSONDatabase, one record per line,
    database_tuning_record.json      appended as each round ends
    relax_model_<sha>.json         a Relax model run's module, weights bound
    progress.jsonl                 one line per measured round: trials, best, valid, elapsed (a
                                     model's best is its estimated latency; the round's task is named),
                                     and a model run's last line, once its best kernels were timed again
    confirmed.jsonl                a model's best kernels timed again after tuning (:mod:`.confirm`)
    logs/                          MetaSchedule's per-task logs (HeronSearch's round statistics)
    ms_heron.lock                  held by the tuning process (its pid inside); a second one is refused
    baseline/                      the same layout for MetaSchedule's default search, if asked for

Everything is appended line by line, so a run killed at any point loses at most the round in
flight: on resume a torn last line is cut off, the records are loaded, HeronSearch warms its cost
models from them and never measures them again, and ``trials`` counts the records already there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from .. import __version__, workloads
from ..errors import HeronError
from ..hardware.targets import target_json
from ..records import (
    CHOICE_TOP_K,
    Merged,
    confirmed_seconds,
    cut_torn_line,
    first_records,
    holds_database,
    json_lines,
    measured_seconds,
    merge_records,
    open_database,
    record_seconds,
    records_file,
)
from ..relax import Task, TaskTime, bind_params, compile_lowered, from_onnx, lower_for_tuning, model_tasks, task_times
from ..space import HeronSpace
from ..workloads import KERNEL, Workload, from_func
from .budget import Budget, BudgetedRunner, CandidateCost, WatchedSearch
from .confirm import chosen_database, confirm_best
from .loop import TRIALS_PER_ROUND, NoValidRecord, TuningRound, best_schedule, tune_tasks, workload_task
from .setup import Search, measuring, search_parts

#: The family of a model run (its tasks are the model's fused kernels).
MODEL = "model"
RUN_FILE = "ms_heron_run.json"
#: Held by the process that tunes the work dir.
LOCK_FILE = "ms_heron.lock"
PROGRESS_FILE = "progress.jsonl"
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
    #: An ONNX model: its path, the SHA-256 of its bytes, and static shapes for symbolic inputs.
    model: str = ""
    model_sha256: str = ""
    input_shapes: dict = field(default_factory=dict)
    #: A model tuned with exact exp/erf/tanh instead of TVM's fast approximations (its tasks differ).
    exact_math: bool = False
    #: Which TVM and ms_heron wrote the run (records of other versions may replay differently).
    versions: dict = field(default_factory=lambda: {"tvm": tvm.__version__, "ms_heron": __version__})

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
        return RunSpec(
            family=MODEL,
            shape={},
            dtype="",
            target=target_json(target),
            seed=seed,
            label=path.stem,
            model=str(path),
            model_sha256=_sha256(path),
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
        """A Relax module (``params`` bound as its weights), kept in ``work_dir`` as TVM's JSON under a
        name made from its SHA-256, so the work dir alone carries the run and no other model is overwritten."""
        text = tvm.ir.save_json(bind_params(mod, params))
        digest = hashlib.sha256(text.encode()).hexdigest()
        name = f"{RELAX_FILE_PREFIX}{digest[:16]}.json"
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        if not (Path(work_dir) / name).exists():
            (Path(work_dir) / name).write_text(text)
        return RunSpec(
            family=MODEL,
            shape={},
            dtype="",
            target=target_json(target),
            seed=seed,
            label=label,
            model=name,
            model_sha256=digest,
            exact_math=exact_math,
        )

    def workload(self) -> Workload:
        if self.kernel:
            return from_func(tvm.script.from_source(self.kernel), self.label)
        return workloads.make(self.family, self.dtype, target=Target(self.target), **self.shape)

    def same_task(self, other: RunSpec) -> bool:
        def key(spec: RunSpec) -> tuple:
            return (
                spec.family,
                spec.shape,
                spec.dtype,
                spec.kernel,
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
        return f"{self.family} {dims} {self.dtype}"


@dataclass(kw_only=True)
class Progress:
    """The state after a measured round, as written to ``progress.jsonl``."""

    trials: int
    valid: int
    best_seconds: float  # inf until a candidate is valid; a model's estimated latency (inf until every task ran)
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


class TuningRun:
    """One work dir. ``TuningRun.create(...)`` starts or resumes; ``TuningRun.open(dir)`` reads one."""

    def __init__(self, work_dir: Path, spec: RunSpec):
        self.work_dir = Path(work_dir)
        self.spec = spec
        #: The kernel tuned; None for a model run (its tasks come from :meth:`tasks`).
        self.workload = None if spec.model else spec.workload()
        self.target = Target(spec.target)
        #: The records, read once per run object (:meth:`database`); while tuning, the live database.
        self._database: ms.database.Database | None = None

    @property
    def is_model(self) -> bool:
        return bool(self.spec.model)

    # -- opening ----------------------------------------------------------------------------

    @staticmethod
    def create(work_dir: str | Path, spec: RunSpec) -> TuningRun:
        work_dir = Path(work_dir)
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
                    f"work dir {work_dir} holds records measured for target {json.dumps(held.target)}, not "
                    f"{json.dumps(spec.target)}; timings on one target do not rank kernels for another: tune "
                    "into another --work-dir (or resume with the run's own target)"
                )
            spec = held  # resume as started (seed, model path)
        elif holds_database(work_dir):
            raise RunError(
                f"work dir {work_dir} holds a MetaSchedule database not made by ms-heron; use another --work-dir"
            )
        else:
            run_file.write_text(json.dumps(asdict(spec), indent=1) + "\n")
        return TuningRun(work_dir, spec)

    @staticmethod
    def open(work_dir: str | Path) -> TuningRun:
        work_dir = Path(work_dir)
        run_file = work_dir / RUN_FILE
        if not run_file.exists():
            raise RunError(
                f"{work_dir} holds no ms-heron run ({RUN_FILE} is missing); tune into it first: "
                f"ms-heron tune ... --work-dir {work_dir}"
            )
        return TuningRun(work_dir, _read_spec(run_file))

    def baseline(self) -> TuningRun:
        """MetaSchedule's default search on the same workload, in ``baseline/``."""
        model = str(self.work_dir / self.spec.model) if self.spec.model else ""  # a Relax module stays here
        return TuningRun(self.work_dir / BASELINE_DIR, dataclasses.replace(self.spec, model=model))

    # -- reading ------------------------------------------------------------------------------

    def space(self) -> HeronSpace:
        """The space generator this run tunes with (the report rebuilds its design spaces from it)."""
        return HeronSpace()

    def database(self) -> ms.database.Database:
        """The records, read once per run object without writing a file (so reports and ``show``
        beside a live run leave its database byte-identical); once this object tunes, the database
        it tunes into, which holds every record stored since."""
        if self._database is None:
            self._database = first_records(self.work_dir, target=self.target)
        return self._database

    @functools.cached_property
    def model(self) -> IRModule:
        """A model run's model, imported through Relax (or a Relax module kept in the work dir);
        refused when the file changed since the run began."""
        path = self.work_dir / self.spec.model  # an ONNX model's path is absolute
        if not path.is_file():
            raise RunError(
                f"{self.work_dir} tunes the model {path}, which is gone; put it back or tune into another --work-dir"
            )
        if _sha256(path) != self.spec.model_sha256:
            raise RunError(
                f"{path} changed since {self.work_dir} began tuning it; tune the new model into another --work-dir"
            )
        if path.name.startswith(RELAX_FILE_PREFIX):
            return tvm.ir.load_json(path.read_text())
        return from_onnx(self.onnx_model, {name: tuple(dims) for name, dims in self.spec.input_shapes.items()})

    @functools.cached_property
    def onnx_model(self):
        """An ONNX model run's file, loaded once (Relax imports it, ONNX Runtime runs it beside)."""
        import onnx  # pylint: disable=import-outside-toplevel

        return onnx.load(str(self.work_dir / self.spec.model))

    @functools.cached_property
    def lowered(self) -> IRModule:
        """The model bound, legalized and fused: its fused TIR functions are the tasks."""
        return lower_for_tuning(self.model, None, self.target, exact_math=self.spec.exact_math)

    @functools.cached_property
    def tasks(self) -> list[Task]:
        """What this run tunes: a kernel run's one task, a model run's fused kernels (from
        :attr:`lowered`, extracted once per run object)."""
        return model_tasks(self.lowered, self.target) if self.is_model else [workload_task(self.workload, self.target)]

    def compile(self, database: ms.Database | None = None):
        """The model compiled with this run's chosen kernels (or ``database``'s best), from :attr:`lowered`."""
        chosen = self.chosen_database() if database is None else database
        return compile_lowered(chosen, self.lowered, self.target, self.tasks)

    def chosen_database(self) -> ms.Database:
        """Each task's kernel a compiled model runs: the fastest of its best records timed again
        (:func:`.confirm.chosen_database`)."""
        return chosen_database(self.database(), self.tasks, confirmed_seconds(self.work_dir))

    def task_times(self) -> list[TaskTime]:
        """A model run's tasks with their call counts and best kernels so far (confirmed times where
        the best kernel was timed again after tuning)."""
        return task_times(self.database(), self.tasks, self.target, confirmed_seconds(self.work_dir))

    def best_schedule(self, task: str = "") -> Schedule:
        """The fastest valid schedule of the kernel, or of the model task named ``task``."""
        if not self.is_model:
            return best_schedule(self.database(), self.workload, self.target)
        tasks = {t.name: t for t in self.tasks}
        if task not in tasks:
            raise RunError(
                f"name a task of {self.spec.describe()}: {', '.join(tasks)}"
                if not task
                else f"{self.spec.describe()} has no task {task!r}; its tasks: {', '.join(tasks)}"
            )
        func = tasks[task].mod["main"]
        sch = ms.tir_integration.compile_tir(self.chosen_database(), func, self.target)
        if sch is None:
            raise NoValidRecord(f"no valid tuning record for task {task} yet; tune longer (more --trials)")
        return sch

    def check_best(self) -> None:
        """Run the best kernel once against the workload's reference (:class:`WrongResult` if it
        differs): a record's time means nothing for a kernel that computes something else."""
        from ..workloads.evaluate import build, run_and_check  # pylint: disable=import-outside-toplevel

        run_and_check(build(self.best_schedule().mod, self.target), self.workload)

    def seconds(self) -> list[float]:
        """Mean seconds of every record in the order measured (inf: failed)."""
        return measured_seconds(self.work_dir)

    def progress(self) -> list[Progress]:
        rows = json_lines(self.work_dir / PROGRESS_FILE)
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
            for r in rows
        ]

    def state(self) -> Progress:
        """Trials, valid count and best from the database itself (the progress log may lag it)."""
        secs = [record_seconds(r.run_secs) for r in self.database().get_all_tuning_records()]
        valid = [s for s in secs if s < math.inf]
        rows = self.progress()
        elapsed = rows[-1].elapsed_s if rows else 0.0
        if self.is_model:
            best = sum(t.calls * t.seconds for t in self.task_times()) if secs else math.inf
            return Progress(trials=len(secs), valid=len(valid), best_seconds=best, elapsed_s=elapsed)
        return Progress(
            trials=len(secs), valid=len(valid), best_seconds=min(valid, default=math.inf), elapsed_s=elapsed
        )

    # -- tuning -------------------------------------------------------------------------------

    def tune(
        self,
        trials: int,
        *,
        search: Search = "heron",
        time_budget_s: float | None = None,
        on_round: Callable[[Progress], None] | None = None,
        per_round: int = TRIALS_PER_ROUND,
        stop: Callable[[], bool] | None = None,
        runner: ms.runner.Runner | None = None,
        space: HeronSpace | None = None,
        strategy: Any = None,
        task_scheduler: Any = None,
        say: Callable[[str], None] | None = None,
    ) -> Progress:
        """Tune until the work dir holds ``trials`` records or the time budget is spent (no
        candidate is measured past it; each task gets its first round), or resume a run that holds
        fewer. The one tuning path: the CLI commands, the demo and the bench scripts all come here.
        One process at a time: the work dir's lock refuses a second one (:class:`RunError`).

        Parameters
        ----------
        search
            HeronSpace + HeronSearch, or MetaSchedule's default search (:data:`~ms_heron.tuning.Search`).
        time_budget_s
            Wall-clock seconds, set-up included.
        on_round
            Called with the run's progress after every measured round.
        per_round
            Candidates measured per round.
        stop
            Asked before every round (the CLI's CTRL-C).
        runner
            Measures elsewhere (:meth:`ms_heron.tuning.measure.Tracker.runner`).
        space, strategy
            Replace the search's own space generator (a HeronSpace with your ``user_rules``) or
            strategy (MetaSchedule's ``"evolutionary"`` over HeronSpace, a HeronSearch with other options).
        task_scheduler
            Replaces the search's own sharing of a model's trials (:func:`.loop.tune_tasks`).
        say
            Told, in one line, that the run resumes or has nothing left to tune (the CLI prints it).
        """
        say = say or (lambda _: None)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with _work_dir_lock(self.work_dir):
            # the one read of the records: the database this run tunes into, which every later
            # question of this object (its state, task times, kernel choice) asks
            self._database = open_database(self.work_dir, self.target)
            before = self.state()
            todo = trials - before.trials
            if todo <= 0:
                say(f"{before.trials} records already in {self.work_dir}; nothing to tune (raise --trials to go on)")
                return before
            if before.trials:
                say(f"resuming from {before.trials} records in {self.work_dir}")
            started = time.monotonic()
            current = Progress(
                trials=before.trials, valid=before.valid, best_seconds=before.best_seconds, elapsed_s=before.elapsed_s
            )

            space, strategy = search_parts(search, space, strategy)
            watched = WatchedSearch(strategy, stop=stop)

            def round_ended() -> None:  # the one round event: progress file, caller's hook
                current.elapsed_s = before.elapsed_s + time.monotonic() - started
                current.search_s_per_round = watched.per_round_seconds()
                with open(self.work_dir / PROGRESS_FILE, "a") as log:
                    log.write(json.dumps(asdict(current)) + "\n")
                if on_round is not None:
                    on_round(dataclasses.replace(current))  # a snapshot: the caller may keep it

            cut_torn_line(self.work_dir / PROGRESS_FILE)  # before this run appends to it
            tasks = self.tasks  # a model's lowering counts in the budget, as the rest of set-up does
            # built here, so that a model's confirmation measures with the same ones
            builder, runner = measuring(self.target, cold=self.is_model, time_budget_s=time_budget_s, runner=runner)
            # the budget counts the set-up so far: a model's lowering, the builder's and runner's workers
            left_s = None if time_budget_s is None else max(0.0, time_budget_s - (time.monotonic() - started))
            cost = CandidateCost()

            def confirm_reserve_s() -> float:  # a measured candidate's cost per record timed again
                return len(tasks) * CHOICE_TOP_K * cost.seconds() if self.is_model else 0.0

            def round_measured(r: TuningRound) -> None:
                cost.add_round(r.elapsed_s, r.trials)
                current.trials += r.measured
                current.valid += r.valid
                current.best_seconds = r.model_seconds()
                if self.is_model:
                    current.task, current.task_seconds = r.task, r.best_seconds[r.task]
                round_ended()

            database = tune_tasks(
                tasks,
                self.target,
                str(self.work_dir),
                todo,
                cold=self.is_model,
                search=search,
                space=space,
                strategy=watched,
                task_scheduler=task_scheduler,
                seed=self.spec.seed,
                num_trials_per_iter=min(per_round, todo),
                on_round=round_measured,
                time_budget_s=left_s,
                reserve_s=confirm_reserve_s,
                builder=builder,
                runner=runner,
                database=self._database,
            )
            if self.is_model and (stop is None or not stop()):
                self._confirm(database, builder, runner, say)
                current.best_seconds, current.confirmed = self.state().best_seconds, True
                current.task, current.task_seconds = "", math.inf
                round_ended()
            return self.state()

    def confirm(self) -> None:
        """Time each task's best kernels again, as a model run does when its tuning ends: for a run
        stopped before its end, or tuned by an ms_heron that did not, so that its kernel choice and
        estimate are taken as a finished run's are."""
        if not self.is_model:
            raise RunError(f"{self.spec.describe()} is a kernel run; only a model run's tasks are timed again")
        builder, runner = measuring(self.target, cold=True, time_budget_s=None)
        with _work_dir_lock(self.work_dir):
            self._confirm(self.database(), builder, runner, lambda _: None)

    def _confirm(self, database, builder, runner, say) -> None:
        """Time each task's best kernels again (:mod:`.confirm`) with the tuning's builder and runner,
        out of the budget's reach (its reserve was kept for this)."""
        if isinstance(runner, BudgetedRunner):
            runner = runner.until(Budget())
        say(
            f"timing each task's {CHOICE_TOP_K} best kernels again, to choose and estimate by times "
            "not biased by the fastest of noisy timings"
        )
        confirm_best(str(self.work_dir), database, self.tasks, self.target, builder=builder, runner=runner)


def merge_runs(sources: Sequence[str | Path], dest: str | Path, target: Target | None = None) -> Merged:
    """Add to ``dest`` every record of ``sources`` (work dirs or MetaSchedule database dirs) that was
    measured for ``dest``'s target and is not there yet; ``dest`` becomes a run of the first source's
    run file when it has none. The target is ``dest``'s, else ``target``, else the first source's."""
    dest = Path(dest)
    sources = [Path(s) for s in sources]
    for source in sources:
        if not records_file(source).is_file():
            raise RunError(
                f"{source} holds no tuning records ({records_file(source).name} is missing); name work dirs of "
                "ms-heron runs"
            )
        if source.resolve() == dest.resolve():
            raise RunError(f"{source} is the destination; name it once, last")
    runs = [TuningRun.open(s) for s in [dest, *sources] if (s / RUN_FILE).is_file()]
    if runs and runs[0].work_dir == dest:
        held = runs[0].spec.target
    elif target is not None:
        held = target_json(target)
    elif runs:
        held = runs[0].spec.target
    else:
        raise RunError("none of the work dirs has an ms-heron run file to take the target from; name it with --target")
    dest.mkdir(parents=True, exist_ok=True)
    with _work_dir_lock(dest):
        if not (dest / RUN_FILE).exists() and runs:
            spec = next((r.spec for r in runs if r.spec.target == held), None)
            if spec is not None:
                (dest / RUN_FILE).write_text(json.dumps(asdict(spec), indent=1) + "\n")
        return merge_records(sources, dest, held)


@contextlib.contextmanager
def _work_dir_lock(work_dir: Path):
    """Hold ``work_dir``'s lock (an OS file lock with the holder's pid in the file). The OS drops it
    when the holder exits, however it dies, so a killed run never leaves a stale lock behind."""
    with open(work_dir / LOCK_FILE, "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise RunError(
                f"work dir {work_dir} is being tuned by process {holder}; wait for it to finish, or tune into "
                "another --work-dir (report and show may read it meanwhile)"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield
        finally:
            lock.truncate(0)


def _sha256(path: Path) -> str:
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
        raise RunError(f"{run_file} is not an ms-heron run file ({err}); use another --work-dir") from err
