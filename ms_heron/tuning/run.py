"""A tuning run in a work directory: what it tunes, its records and its progress, resumable.

What it tunes is one task source: a suite workload, a user's kernel (its TVMScript is kept in the
run file), an ONNX model (its path and SHA-256) or a Relax module (kept in the work dir as TVM's
JSON); every fused kernel of a model is a task. The work dir's files are :mod:`.workdir`'s.

Everything is appended line by line, so a run killed at any point loses at most the round in
flight: on resume the records are loaded, HeronSearch warms its cost models from them and never
measures them again, and ``max_trials_global`` counts the records already there.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tvm
from tvm import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..records import (
    CHOICE_TOP_K,
    CorruptDatabase,
    best_seconds,
    confirmed_seconds,
    first_records,
    measured_seconds,
    open_database,
    record_seconds,
    top_records,
)
from ..relax import (
    Task,
    TaskTime,
    compile_lowered,
    from_onnx,
    lower_for_tuning,
    model_tasks,
    task_times,
)
from ..space import HeronSpace
from .budget import Budget, BudgetedRunner, WatchedSearch
from .confirm import chosen_database, confirm_best
from .fallback import Untuned, fallback_database
from .loop import (
    TRIALS_PER_ROUND,
    NoValidRecord,
    TuningRound,
    best_schedule,
    tune_tasks,
    workload_task,
)
from .setup import Search, builder_for, runner_for, search_parts
from .store import RecordStore, Seeded, seed_from
from .workdir import (
    BASELINE_DIR,
    RELAX_FILE_PREFIX,
    Progress,
    RunError,
    RunSpec,
    claim,
    file_sha256,
    log_progress,
    note_seeded,
    read_progress,
    read_spec,
    seeded_tasks,
    work_dir_lock,
)


class TuningRun:
    """One work dir. ``TuningRun.create(...)`` starts or resumes; ``TuningRun.open(dir)`` reads
    one."""

    def __init__(self, work_dir: Path, spec: RunSpec):
        self.work_dir = Path(work_dir)
        self.spec = spec
        #: The kernel tuned; None for a model run (its tasks come from :meth:`tasks`).
        self.workload = None if spec.model else spec.workload()
        self.target = Target(spec.target)
        #: The records, read once per run object (:meth:`database`); while tuning, the live
        #: database.
        self._database: ms.database.Database | None = None

    @property
    def is_model(self) -> bool:
        return bool(self.spec.model)

    # -- opening ----------------------------------------------------------------------------

    @staticmethod
    def create(work_dir: str | Path, spec: RunSpec) -> TuningRun:
        """Start a run of ``spec`` in ``work_dir``, or resume the one there
        (:func:`.workdir.claim`)."""
        return TuningRun(Path(work_dir), claim(Path(work_dir), spec))

    @staticmethod
    def open(work_dir: str | Path) -> TuningRun:
        """The run ``work_dir`` holds, to read (its report, its best kernel)."""
        return TuningRun(Path(work_dir), read_spec(Path(work_dir)))

    def baseline(self) -> TuningRun:
        """MetaSchedule's default search on the same workload, in ``baseline/``."""
        # a Relax module stays here
        model = str(self.work_dir / self.spec.model) if self.spec.model else ""
        return TuningRun(self.work_dir / BASELINE_DIR, dataclasses.replace(self.spec, model=model))

    # -- reading ------------------------------------------------------------------------------

    def space(self) -> HeronSpace:
        """The space generator this run tunes with (the report rebuilds its design spaces from
        it)."""
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
                f"{self.work_dir} tunes the model {path}, which is gone; put it back or tune into "
                "another --work-dir"
            )
        if file_sha256(path) != self.spec.model_sha256:
            raise RunError(
                f"{path} changed since {self.work_dir} began tuning it; tune the new model into "
                "another --work-dir"
            )
        if path.name.startswith(RELAX_FILE_PREFIX):
            return tvm.ir.load_json(path.read_text())
        return from_onnx(
            self.onnx_model, {name: tuple(dims) for name, dims in self.spec.input_shapes.items()}
        )

    @functools.cached_property
    def onnx_model(self):
        """An ONNX model run's file, loaded once (Relax imports it, ONNX Runtime runs it beside)."""
        import onnx  # pylint: disable=import-outside-toplevel

        return onnx.load(str(self.work_dir / self.spec.model))

    @functools.cached_property
    def lowered(self) -> IRModule:
        """The model bound, legalized and fused: its fused TIR functions are the tasks."""
        balance = self.spec.flops_per_byte
        return lower_for_tuning(
            self.model,
            None,
            self.target,
            exact_math=self.spec.exact_math,
            flops_per_byte=math.inf if balance is None else balance,
        )

    @functools.cached_property
    def tasks(self) -> list[Task]:
        """What this run tunes: a kernel run's one task, a model run's fused kernels (from
        :attr:`lowered`, extracted once per run object)."""
        return (
            model_tasks(self.lowered, self.target)
            if self.is_model
            else [workload_task(self.workload, self.target)]
        )

    def compile(self, database: ms.Database | None = None, *, untuned: Untuned = "analytical"):
        """The model compiled with this run's chosen kernels (or ``database``'s best), from
        :attr:`lowered`; a task without a valid record runs what ``untuned`` says
        (:data:`.fallback.Untuned`), with a warning."""
        chosen = self.chosen_database() if database is None else database
        fallback = fallback_database(chosen, self.tasks, self.target, untuned)
        return compile_lowered(chosen, self.lowered, self.target, self.tasks, fallback=fallback)

    def chosen_database(self) -> ms.Database:
        """Each task's kernel a compiled model runs: the fastest of its best records timed again
        (:func:`.confirm.chosen_database`)."""
        return chosen_database(self.database(), self.tasks, confirmed_seconds(self.work_dir))

    def task_times(self) -> list[TaskTime]:
        """A model run's tasks with their call counts and best kernels so far (confirmed times where
        the best kernel was timed again after tuning)."""
        return task_times(
            self.database(), self.tasks, self.target, confirmed_seconds(self.work_dir)
        )

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
            raise NoValidRecord(
                f"no valid tuning record for task {task} yet; tune longer (more --trials)"
            )
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
        return read_progress(self.work_dir)

    def state(self) -> Progress:
        """Trials, valid count and best from the database itself (the progress log may lag it)."""
        secs = [record_seconds(r.run_secs) for r in self.database().get_all_tuning_records()]
        valid = [s for s in secs if s < math.inf]
        rows = self.progress()
        elapsed = rows[-1].elapsed_s if rows else 0.0
        if self.is_model:
            best = sum(t.calls * t.seconds for t in self.task_times()) if secs else math.inf
            return Progress(
                trials=len(secs), valid=len(valid), best_seconds=best, elapsed_s=elapsed
            )
        return Progress(
            trials=len(secs),
            valid=len(valid),
            best_seconds=min(valid, default=math.inf),
            elapsed_s=elapsed,
        )

    # -- tuning -------------------------------------------------------------------------------

    def tune(
        self,
        max_trials_global: int,
        *,
        search: Search = "heron",
        deadline: float | None = None,
        on_round: Callable[[Progress], None] | None = None,
        num_trials_per_iter: int = TRIALS_PER_ROUND,
        stop: Callable[[], bool] | None = None,
        runner: ms.runner.Runner | None = None,
        space: HeronSpace | None = None,
        strategy: Any = None,
        task_scheduler: Any = None,
        say: Callable[[str], None] | None = None,
        store: RecordStore | None = None,
        records_from: Sequence[str | Path] = (),
        retune: bool = False,
        pretrained_model: bool = False,
    ) -> Progress:
        """Tune until the work dir holds ``max_trials_global`` records or the time budget is spent
        (no candidate is measured past it; each task gets its first round), or resume a run that
        holds fewer. The one tuning path: the CLI commands, the demo and the bench scripts all come
        here. One process at a time: the work dir's lock refuses a second one (:class:`RunError`).

        Parameters
        ----------
        search
            HeronSpace + HeronSearch, or MetaSchedule's default search
            (:data:`~ms_heron.tuning.Search`).
        deadline
            When tuning ends, a ``time.monotonic()`` instant (:func:`.budget.deadline_after`, taken
            where the caller's work began: a model's import counts in the budget, as set-up does).
        on_round
            Called with the run's progress after every measured round.
        num_trials_per_iter
            Candidates measured per round.
        stop
            Asked before every round (the CLI's CTRL-C).
        runner
            Measures elsewhere (:meth:`ms_heron.tuning.measure.Tracker.runner`).
        space, strategy
            Replace the search's own space generator (a HeronSpace with your ``user_rules``) or
            strategy (MetaSchedule's ``"evolutionary"`` over HeronSpace, a HeronSearch with other
            options).
        task_scheduler
            Replaces the search's own sharing of a model's trials (:func:`.loop.tune_tasks`).
        say
            Told, in one line each, that the run resumes or has nothing left to tune, and what the
            store and ``records_from`` held (the CLI prints it).
        store
            Seeds the work dir with the best programs it holds of the run's tasks, and keeps the
            run's own when tuning ends (:mod:`.store`); None: neither. The tasks tuned start from
            the stored programs of other shapes, projected (:mod:`ms_heron.search.transfer`).
        records_from
            More work dirs or stores to seed from; records of another target are skipped, and
            counted in one line.
        retune
            Tune the tasks the store or ``records_from`` held too (else their seeded programs are
            only timed again, with the run's other best kernels).
        pretrained_model
            Start the heron search's cost model from the shipped pretrained one
            (:mod:`ms_heron.search.pretrained`) instead of untrained.
        """
        say = say or (lambda _: None)
        with work_dir_lock(self.work_dir):
            # the one read of the records: the database this run tunes into, which every later
            # question of this object (its state, task times, kernel choice) asks
            self._database = open_database(self.work_dir, self.target)
            # a fresh run seeded from the store below does not resume
            resumed_from = len(self._database)
            # a model's lowering counts in the budget, as the rest of set-up does
            tasks = self.tasks
            sources = [*([store.dir_for(self.target)] if store else []), *records_from]
            seeded = Seeded()
            if sources:
                # a task this work dir tuned itself is tuned on when it resumes, though the store
                # holds it since (its own programs, kept when it ended)
                tuned_here = {
                    t.name for t in tasks if top_records(self._database, t.mod, 1)
                } - seeded_tasks(self.work_dir)
                seeded = seed_from(self._database, tasks, self.target, sources)
                seeded.tasks -= tuned_here
                note_seeded(self.work_dir, seeded.tasks)
            for line in seeded.lines(len(tasks)):
                say(line)
            kept = set() if retune else seeded.tasks
            tuned = [t for t in tasks if t.name not in kept]
            # the estimate of the tasks not tuned, added to every round's
            untuned_s = sum(
                t.weight * best_seconds(self._database, t.mod) for t in tasks if t.name in kept
            )
            before = self.state()
            todo = max_trials_global - before.trials
            if todo <= 0 and not seeded.added:  # programs just seeded are still timed again
                say(
                    f"{before.trials} records already in {self.work_dir}; nothing to tune (raise "
                    "--trials to go on)"
                )
                return before
            if resumed_from:
                say(f"resuming from {resumed_from} records in {self.work_dir}")
            started = time.monotonic()
            current = Progress(
                trials=before.trials,
                valid=before.valid,
                best_seconds=before.best_seconds,
                elapsed_s=before.elapsed_s,
            )

            space, strategy = search_parts(search, space, strategy)
            donors = getattr(strategy, "donors", None)  # HeronSearch's; MetaSchedule's has none
            if donors is not None:
                donors.take_stored(seeded.donors)
            watched = WatchedSearch(strategy, stop=stop)

            def round_ended() -> None:  # the one round event: progress file, caller's hook
                current.elapsed_s = before.elapsed_s + time.monotonic() - started
                current.search_s_per_round = watched.clock.round_search_s()
                log_progress(self.work_dir, current)
                if on_round is not None:
                    on_round(dataclasses.replace(current))  # a snapshot: the caller may keep it

            # built here, so that a model's confirmation measures with the same ones
            builder = builder_for(deadline)
            runner = runner or runner_for(self.target, cold=self.is_model, deadline=deadline)

            def confirm_reserve_s() -> float:  # a measured candidate's cost per record timed again
                return (
                    len(tasks) * CHOICE_TOP_K * watched.clock.candidate_s()
                    if self.is_model
                    else 0.0
                )

            def round_measured(r: TuningRound) -> None:
                current.trials += r.measured
                current.valid += r.valid
                current.best_seconds = r.model_seconds() + untuned_s
                if self.is_model:
                    current.task, current.task_seconds = r.task, r.best_seconds[r.task]
                round_ended()

            database = self._database
            if tuned and todo > 0:
                database = tune_tasks(
                    tuned,
                    self.target,
                    str(self.work_dir),
                    todo,
                    cold=self.is_model,
                    search=search,
                    space=space,
                    strategy=watched,
                    task_scheduler=task_scheduler,
                    seed=self.spec.seed,
                    num_trials_per_iter=min(num_trials_per_iter, todo),
                    on_round=round_measured,
                    deadline=deadline,
                    reserve_s=confirm_reserve_s,
                    builder=builder,
                    runner=runner,
                    database=self._database,
                    pretrained_model=pretrained_model,
                )
            if self.is_model and (stop is None or not stop()):
                self._confirm(database, builder, runner, say)
                current.best_seconds, current.confirmed = self.state().best_seconds, True
                current.task, current.task_seconds = "", math.inf
                round_ended()
            if store is not None:
                _keep(store, database, tasks, self.target, say)
            return self.state()

    def confirm(self) -> None:
        """Time each task's best kernels again, as a model run does when its tuning ends: for a run
        stopped before its end, or tuned by an ms_heron that did not, so that its kernel choice and
        estimate are taken as a finished run's are."""
        if not self.is_model:
            raise RunError(
                f"{self.spec.describe()} is a kernel run; only a model run's tasks are timed again"
            )
        builder, runner = builder_for(None), runner_for(self.target, cold=True, deadline=None)
        with work_dir_lock(self.work_dir):
            self._confirm(self.database(), builder, runner, lambda _: None)

    def _confirm(self, database, builder, runner, say) -> None:
        """Time each task's best kernels again (:mod:`.confirm`) with the tuning's builder and
        runner, out of the budget's reach (its reserve was kept for this)."""
        if isinstance(runner, BudgetedRunner):
            runner = runner.until(Budget())
        say(
            f"timing each task's {CHOICE_TOP_K} best kernels again, to choose and estimate by "
            "times not biased by the fastest of noisy timings"
        )
        confirm_best(
            str(self.work_dir), database, self.tasks, self.target, builder=builder, runner=runner
        )


def _keep(store: RecordStore, database, tasks, target: Target, say) -> None:
    """Add the run's best programs to ``store``; a store that cannot be written is told in one
    line, since the work dir holds them all."""
    try:
        added = store.keep(database, tasks, target)
    except (CorruptDatabase, OSError) as err:
        say(f"the records store was not updated ({err}); the work dir holds every record")
        return
    if added:
        say(f"kept {added} programs in the records store {store.dir_for(target)}")
