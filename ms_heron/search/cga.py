"""HeronSearch: Heron's constrained genetic algorithm (CGA) as a MetaSchedule search strategy.

Every program it proposes is a CP-SAT solution of its design space's ConstraintModel, so every
candidate is valid by construction. Per round (Heron §4):

1. population = last round's survivors + measured elite + fresh constrained-random samples;
2. ``generations`` times: roulette-select parents by predicted score; each child fixes the key
   variables (picked by the decision model's split gains, else at random) to one parent's value or
   the other's, leaves one key free (the mutation) and lets CP-SAT re-solve the rest;
3. drop duplicates and measured programs; measure the best ``1 - epsilon`` by prediction plus an
   ``epsilon`` share picked by roulette.

The genetic operators are in :mod:`.genetic`; the two cost models that rank programs, and the
choice between them, in :mod:`.ranking`. Round 0 is constrained-random: no prediction means
anything before measurements exist, unless the feature model shared by a model's tasks has
already learned from the tasks tuned before (then it ranks round 0, as in MetaSchedule's search).
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy

from ..constraints import (
    ConstraintModel,
    ConstraintOptions,
    Infeasible,
    RepairedDecision,
    Solver,
    decided_values,
    derive,
    native_sample,
    replay,
    values_from_trace,
)
from ..hardware.targets import usable_cores
from ..intrinsics import ensure_registered, import_x86_intrinsics
from ..records import record_seconds, result_seconds
from ..schedule.annotations import is_metaschedule_space
from ..schedule.options import check
from .effort import Effort
from .genetic import (
    Program,
    alternate,
    choose_keys,
    crossover,
    roulette,
    space_weights,
    take_roulette,
    unique,
    untried_spaces_first,
)
from .ranking import FEATURES, Ranking
from .transfer import Donors, donation, project, signature

#: The constraints a space is searched under, first that has a solution, and what its log says.
#: Whole rows per core come off first, then even shares of the cores (which whole rows imply),
#: since a space may hold no such split at all.
CONSTRAINT_TIERS = (
    (ConstraintOptions(), ""),
    (
        ConstraintOptions(row_affinity=False),
        "its performance constraints without whole rows per core",
    ),
    (
        ConstraintOptions(row_affinity=False, balanced_jobs=False),
        "its performance constraints without even core shares",
    ),
    (ConstraintOptions().validity_only(), "its validity constraints only"),
)
#: How MetaSchedule's LocalBuilder reports a candidate it killed.
BUILD_TIMEOUT = "LocalBuilder: Timeout"

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RoundStats:
    """What one round did; logged through MetaSchedule's task logger and kept in
    ``HeronSearch.stats``."""

    round: int
    sampled: int = 0  # CP-SAT solutions drawn (fresh samples and children)
    measured: int = 0
    valid: int = 0
    ranked_by: str = ""
    rank_correlation: dict = field(default_factory=dict)  # cost model name -> rho on this batch
    best_seconds: float = math.inf  # best seconds so far
    # solver / replay / cost model / measure
    seconds: dict = field(default_factory=lambda: defaultdict(float))

    def line(self) -> str:
        rho = (
            ", ".join(
                f"{k} {v:+.2f}" for k, v in self.rank_correlation.items() if not math.isnan(v)
            )
            or "n/a"
        )
        secs = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        best = f"{self.best_seconds * 1e3:.4f} ms" if self.best_seconds < math.inf else "none"
        return (
            f"HeronSearch round {self.round}: sampled {self.sampled}, measured {self.measured}, "
            f"valid {self.valid}/{self.measured}, ranked by {self.ranked_by}, rank correlation "
            f"[{rho}], best so far {best}; time: {secs}"
        )


@derived_object
class HeronSearch(PySearchStrategy):
    """Constrained genetic search over HeronSpace's (or any traced) design spaces.

    Parameters
    ----------
    population
        Programs per generation: last round's survivors, the measured elite and fresh samples.
    generations
        Crossover-and-re-solve passes per round before the round's candidates are picked.
    epsilon
        Share of each round measured by roulette over the predicted scores instead of the top
        predictions, so a wrong cost model still sees other programs.
    key_ratio
        Share of a space's decisions a child takes from its parents (the "key" variables, picked by
        the decision model's split gains); CP-SAT re-solves the others.
    elite
        Best measured programs carried into every population.
    transfer
        Programs that other tasks of the same design-space structure found best (tuned earlier in
        this process: a model's convolutions, say; or stored by an earlier run,
        ``donors.take_stored``) projected onto this task and measured first in its first round
        (:mod:`.transfer`); 0 turns transfer off.
    search_share
        The most of a round's time its search may take (sampling, replaying, ranking; the rest is
        building and measuring): population and generations shrink toward it (:mod:`.effort`); 1
        keeps them as given.
    """

    def __init__(
        self,
        *,
        population: int = 64,
        generations: int = 3,
        epsilon: float = 0.4,
        key_ratio: float = 0.2,
        elite: int = 8,
        transfer: int = 4,
        search_share: float = 0.25,
    ):
        import_x86_intrinsics()  # before a TuneContext imports TVM's whole library (see HeronSpace)
        for name, value, low in (
            ("population", population, 1),
            ("generations", generations, 0),
            ("elite", elite, 0),
            ("transfer", transfer, 0),
        ):
            check(
                isinstance(value, int) and value >= low,
                f"HeronSearch({name}={value!r}): give a whole number >= {low}",
            )
        for name, value in (
            ("epsilon", epsilon),
            ("key_ratio", key_ratio),
            ("search_share", search_share),
        ):
            check(
                isinstance(value, (int, float)) and 0.0 <= value <= 1.0,
                f"HeronSearch({name}={value!r}): give a share between 0 and 1",
            )
        self.population = population
        self.generations = generations
        self.epsilon = epsilon
        self.key_ratio = key_ratio
        self.elite = elite
        self.transfer = transfer
        self.search_share = search_share
        #: Shared with every clone, so that the tasks of one tuning call donate to each other.
        self.donors = Donors()
        #: Shared with every clone too: a model's later tasks start at the scale earlier ones
        #: settled on.
        self.effort = Effort(search_share)

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self.mod = context.mod
        self.target = context.target
        ensure_registered(self.target)
        self.postprocs = list(context.space_generator.postprocs)
        self.seed = int(context.rand_state) if int(context.rand_state) >= 0 else 0
        self.logger = _task_logger(context.task_name)

    # -- MetaSchedule interface ---------------------------------------------------------------

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ):
        self.rng = random.Random(self.seed)
        self.max_trials, self.per_round = int(max_trials), int(num_trials_per_iter)
        self.traces, self.models = self._constrained_spaces(design_spaces)
        self.signatures = [signature(m, t) for m, t in zip(self.models, self.traces)]
        self.solvers = [Solver(m, seed=self.seed + i) for i, m in enumerate(self.models)]
        self.ranking = Ranking([m.primary for m in self.models], self.seed, cost_model)
        self.trials = 0
        self.measured: dict[tuple, float] = {}  # program key -> seconds (inf when it failed)
        self.pool: list[Program] = []
        self.stats: list[RoundStats] = []
        self.now = RoundStats(round=-1)  # the warm start's time goes here, unlogged
        self.analytical = self._analytical_choices()
        #: Other tasks' best programs projected onto this one, measured first in round 0.
        self.projected: list[Program] = []
        #: Whether the shared feature model had learned from other tasks before this one's round 0.
        self.transferred = False
        if database is not None and database.has_workload(self.mod):
            self._warm_start(database)

    def _constrained_spaces(self, design_spaces) -> tuple[list, list[ConstraintModel]]:
        """Each design space's trace and constraint model; a space whose model cannot be built, or
        has no solution, is skipped with a warning naming why (the others still tune)."""
        traces, models = [], []
        for index, space in enumerate(design_spaces):
            try:
                model = self._solvable_model(space, index)
            except Exception as err:  # pylint: disable=broad-except  # one bad space must not stop tuning
                self.logger.warning(
                    "HeronSearch skips design space %d: %s: %s", index, type(err).__name__, err
                )
                continue
            traces.append(space.trace.simplified(remove_postproc=True))
            models.append(model)
        if not models:
            raise Infeasible(
                f"HeronSearch: none of the {len(design_spaces)} design spaces of task "
                f"{self.context.task_name!r} has a solvable constraint model (see the task log for "
                "why); tune it with strategy='evolutionary' or report the workload"
            )
        return traces, models

    def _solvable_model(self, space, index: int) -> ConstraintModel:
        """The space's model under the first of :data:`CONSTRAINT_TIERS` that has a solution (a
        space whose performance constraints conflict may still hold the best program)."""
        for tier, (options, searched_under) in enumerate(CONSTRAINT_TIERS):
            model = derive(space, self.target, options)
            try:
                Solver(model, seed=self.seed).sample()
            except Infeasible:
                if tier == len(CONSTRAINT_TIERS) - 1:
                    raise
                continue
            if searched_under:
                self.logger.warning(
                    "HeronSearch: design space %d has no program within its performance "
                    "constraints; searching it under %s",
                    index,
                    searched_under,
                )
            return model

    def _analytical_choices(self) -> dict[int, list[Program]]:
        """Per design space with a micro-kernel model, the programs BLIS's analytical model picks,
        one per blocking (:meth:`Solver.analytical`): each space's first measured programs, so that
        a task the scheduler gives one round starts from a sound blocking instead of a random one.

        The spaces are solved on all of the host's cores: this is most of a model's set-up, which
        comes before any measurement, and CP-SAT leaves Python's lock while it solves."""
        with self._timed("solver"), ThreadPoolExecutor(usable_cores()) as pool:
            solved = list(pool.map(Solver.analytical, self.solvers))
        choices = {}
        for space, picks in enumerate(solved):
            programs = unique([Program(space=space, values=values) for values in picks.values()])
            if programs:
                choices[space] = programs
        return choices

    def post_tuning(self) -> None:
        self.pool = []
        if self.measured and not any(s < math.inf for s in self.measured.values()):
            logger.warning(
                "HeronSearch: none of the %d candidates of task %r built and ran; see its log "
                "under <work_dir>/logs for the errors",
                len(self.measured),
                self.context.task_name,
            )

    def generate_measure_candidates(self):
        return self.generate_round(self.per_round)

    def generate_round(self, size: int):
        """A round of at most ``size`` candidates, bred for that many: a budget's short first round
        (:meth:`~ms_heron.tuning.budget.WatchedSearch.first_round`) costs a short search."""
        if self.trials >= self.max_trials:
            return None
        self.now = RoundStats(round=len(self.stats), ranked_by=self.ranking.ranking_model())
        want = min(size, self.per_round, self.max_trials - self.trials)
        if not self.stats and not self.measured:
            self.transferred = self._features_transfer()
            self.projected = self._projections()
        picked = self._leaders(want) or self._pick(self._evolve(want), want)
        self._predict_all(picked)
        self.pending = picked
        self.trials += len(picked)
        self.measure_started = time.perf_counter()
        return [p.candidate for p in picked] or None

    def notify_runner_results(self, measure_candidates, results) -> None:
        stats = self.now
        stats.seconds["measure"] += time.perf_counter() - self.measure_started
        # A round cut short (a late one under a spent budget) returns the first candidates' results.
        self.trials -= len(self.pending) - len(results)
        self.pending = self.pending[: len(results)]
        secs = []
        for program, result in zip(self.pending, results):
            secs.append(result_seconds(result))
            self.measured[program.key] = secs[-1]
        if (
            not self.stats
            and results
            and all(str(r.error_msg or "").startswith(BUILD_TIMEOUT) for r in results)
        ):
            # MetaSchedule re-raises it as a RuntimeError, whatever its class: the message says it
            # all
            raise RuntimeError(
                f"every candidate of the first round of task {self.context.task_name!r} timed out "
                "in the builder: TVM's stock LocalBuilder imports tvm.s_tir.tensor_intrin (15-25 "
                "s) in every build batch; pass builder=ms_heron.tuning.builder.local_builder() to "
                "ms.tune_tir (or a LocalBuilder with a longer timeout_sec)"
            )
        stats.rank_correlation = self.ranking.note_batch(self.pending, secs)
        with self._timed("cost model"):
            self.ranking.fit(self.measured, {p.space for p in self.pending})
        stats.measured, stats.valid = len(secs), sum(s < math.inf for s in secs)
        stats.best_seconds = min(self.measured.values(), default=math.inf)
        self.effort.note_round(
            sum(s for k, s in stats.seconds.items() if k != "measure"), stats.seconds["measure"]
        )
        self._donate()
        self.stats.append(stats)
        self.logger.info(stats.line())

    def clone(self):
        clone = HeronSearch(
            population=self.population,
            generations=self.generations,
            epsilon=self.epsilon,
            key_ratio=self.key_ratio,
            elite=self.elite,
            transfer=self.transfer,
            search_share=self.search_share,
        )
        clone.donors, clone.effort = self.donors, self.effort
        return clone

    # -- transfer between tasks -------------------------------------------------------------------

    def _projections(self) -> list[Program]:
        """Up to ``transfer`` programs other tasks found best, completed by CP-SAT for this task."""
        out = []
        with self._timed("solver"):
            for space, (sig, solver) in enumerate(zip(self.signatures, self.solvers)):
                extents = [d.extent if d.kind == "tile" else 0 for d in solver.model.decisions]
                for donated in self.donors.for_task(
                    sig, self.context.task_name, self.transfer, extents
                ):
                    values = project(solver, donated)
                    if values is not None:
                        out.append(Program(space=space, values=values))
        out = unique(out)[: self.transfer]
        if out:
            self.logger.info(
                "HeronSearch: round 0 starts with %d programs projected from tasks tuned before "
                "(in this run, or stored by an earlier one)",
                len(out),
            )
        return out

    def _donate(self) -> None:
        """Each design space's best program so far, for the tasks of the same structure tuned
        later."""
        best: dict[int, tuple[float, tuple]] = {}
        for key, secs in self.measured.items():
            if secs < best.get(key[0], (math.inf,))[0]:
                best[key[0]] = (secs, key)
        for space, (secs, key) in best.items():
            self.donors.donate(
                self.signatures[space],
                self.context.task_name,
                secs,
                donation(self.models[space], dict(key[1])),
            )

    def _warm_start(self, database) -> None:
        """Records of earlier runs on this workload (a resumed work dir): never measured again, and
        both cost models learn from them before the first round."""
        records = database.get_top_k(database.commit_workload(self.mod), 1 << 30)
        programs, results = [], []
        for record in records:
            for space, (model, trace) in enumerate(zip(self.models, self.traces)):
                values = values_from_trace(model, trace, record.trace)
                if values is None:
                    continue
                program = Program(space=space, values=values)
                self.measured[program.key] = record_seconds(record.run_secs)
                ok = self.measured[program.key] < math.inf
                if self._build([program]):
                    programs.append(program)
                    results.append(
                        RunnerResult(
                            run_secs=record.run_secs, error_msg=None if ok else "failed earlier"
                        )
                    )
                break
        if programs and self.ranking.cost_model is not None:
            self.ranking.cost_model.update(self.context, [p.candidate for p in programs], results)
        self.ranking.fit(self.measured, set(range(len(self.models))))
        self.logger.info(
            "HeronSearch warm start: %d of %d earlier records belong to these design spaces; "
            "they are not measured again",
            len(self.measured),
            len(records),
        )

    # -- cost models ----------------------------------------------------------------------------

    @property
    def guided(self) -> bool:
        """Whether a cost model ranks programs yet: once this task has measurements, or from round 0
        when the feature model already learned from other tasks."""
        return bool(self.measured) or self.transferred

    def _features_transfer(self) -> bool:
        """Whether MetaSchedule's feature model can rank this task's first round: the task scheduler
        shares one model among a model's tasks, so later tasks start from what earlier ones taught
        it (as MetaSchedule's own search does). Otherwise round 0 stays constrained-random."""
        probe = self._build(self._fresh(4))
        self.pool = probe  # they join round 0's population
        with self._timed("cost model"):
            trained = self.ranking.features_trained(probe, self.context)
        if trained:
            self.logger.info(
                "HeronSearch: the shared feature cost model ranks round 0 (trained on other tasks)"
            )
        return trained

    def _predict(self, name: str, programs: list[Program]) -> list[float] | None:
        if not self.guided:
            return None
        if name == FEATURES:
            self._build(programs)  # callers pass programs that build
        with self._timed("cost model"):
            return self.ranking.predict(name, programs, self.context)

    def _rank(self, programs: list[Program]) -> list[Program]:
        """Programs (with candidates when the feature model ranks them), best predicted first."""
        if not self.guided:
            return programs  # round 0 with nothing learned yet: constrained-random
        if self.now.ranked_by == FEATURES:
            programs = self._build(programs)
        scores = self._predict(self.now.ranked_by, programs)
        for p, s in zip(programs, scores or [0.0] * len(programs)):
            p.score = s
        return sorted(programs, key=lambda p: -p.score)

    def _predict_all(self, picked: list[Program]) -> None:
        for name in self.ranking.quality:
            scores = self._predict(name, picked)
            for p, s in zip(picked, scores or []):
                p.predicted[name] = s

    # -- the CGA --------------------------------------------------------------------------------

    def _timed(self, what: str):
        return _Timer(self.now.seconds, what)

    def _fresh(self, n: int) -> list[Program]:
        """Constrained-random programs: TVM's own samplers draw the decisions (MetaSchedule's
        prior), and CP-SAT moves a draw that breaks a constraint to the nearest solution."""
        out = []
        weights = self._space_weights()
        for _ in range(n):
            space = self.rng.choices(range(len(self.models)), weights=weights)[0]
            model = self.models[space]
            with self._timed("replay"):
                drawn = native_sample(
                    model, self.traces[space], self.mod, self.rng.randrange(1 << 30)
                )
            if drawn is not None and not model.violations(drawn):
                out.append(Program(space=space, values=drawn))
                continue
            try:
                with self._timed("solver"):
                    out.append(
                        Program(space=space, values=self.solvers[space].complete({}, hints=drawn))
                    )
            except Infeasible:
                continue
        self.now.sampled += len(out)
        return out

    def _space_weights(self) -> list[float]:
        """Fresh samples go to the spaces whose programs measured fastest (:func:`space_weights`).

        Before any measurement MetaSchedule's own spaces share one Heron space's prior: they are
        there so that nothing MetaSchedule reaches is out of reach, but their validity-only models
        hold many programs Heron's constraints rule out (a BERT GEMM task spent 19 to 27 of its 48
        trials on them, none among its best); one that measures fastest gains its full share.
        """
        default = [is_metaschedule_space(t) for t in self.traces]
        priors = [1.0 / sum(default) if d else 1.0 for d in default]
        best: dict[int, float] = {}
        for (space, _), secs in self.measured.items():
            best[space] = min(best.get(space, math.inf), secs)
        return space_weights(priors, best)

    def _build(self, programs: list[Program]) -> list[Program]:
        """Replay + postprocs for programs without a candidate yet; returns those that pass."""
        with self._timed("replay"):
            for p in programs:
                if p.candidate is None:
                    p.candidate = self._candidate(p)
        return [p for p in programs if p.candidate is not False]

    def _candidate(self, program: Program):
        model = self.models[program.space]
        try:
            sch = replay(model, self.traces[program.space], self.mod, program.values)
        except RepairedDecision:
            return False
        # compute locations as TVM normalized them
        program.values = decided_values(model, sch.trace)
        # as MetaSchedule does: records' traces then split into space and postprocs
        sch.enter_postproc()
        try:
            if not all(p.apply(sch) for p in self.postprocs):
                return False
        # TVM's errors: a postproc that cannot finish this program, as in
        except RuntimeError as err:
            # MetaSchedule's own search, rejects the program and never stops the tuning
            logger.debug(
                "a postproc failed on a program of space %d: %s",
                program.space,
                str(err).splitlines()[0],
            )
            return False
        return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def _elite(self) -> list[Program]:
        done = sorted((s, k) for k, s in self.measured.items() if s < math.inf)
        return [Program(space=k[0], values=dict(k[1])) for _, k in done[: self.elite]]

    def _crossover(self, a: Program, b: Program) -> Program | None:
        keys = choose_keys(
            self.models[a.space].primary, self.ranking.importance(a.space), self.key_ratio, self.rng
        )
        with self._timed("solver"):
            child = crossover(a, b, keys, self.solvers[a.space], self.rng)
        self.now.sampled += child is not None
        return child

    def _evolve(self, want: int) -> list[Program]:
        population = self.effort.population(self.population, want)
        ranked = self._rank(unique(self.pool + self._elite() + self._fresh(population)))
        for _ in range(self.effort.generations(self.generations) if self.guided else 0):
            # nothing built (a postproc rejected every program): the pick tops up with fresh ones
            if not ranked:
                break
            children = []
            for _ in range(population):
                a, b = roulette(ranked, 2, self.rng)
                child = self._crossover(a, b if a.space == b.space else a)
                if child is not None:
                    children.append(child)
            ranked = self._rank(unique(children + self._elite()))
        self.pool = ranked[:population]
        return ranked

    def _leaders(self, want: int) -> list[Program]:
        """The round's picks when the programs that lead any ranking fill it: the projections, each
        followed by an untried design space's first analytical choice (what :meth:`_pick` takes
        first). Then no population is bred or ranked: a budget's short first rounds of MobileNetV2
        spent 0.6-1.2 s each in that search, for 2 to 9 candidates that measured in 0.3-2 s.
        Empty when they do not fill the round."""
        tried = {k[0] for k in self.measured}
        firsts = [
            programs[0]
            for space, programs in sorted(self.analytical.items())
            if programs and space not in tried
        ]
        leading = unique(alternate(self.projected, firsts))
        if len(leading) < want:
            return []
        picked: list[Program] = []
        seen = set(self.measured)  # keys after building, as in _pick
        for p in leading:
            if len(picked) == want:
                break
            if self._build([p]) and p.key not in seen:
                picked.append(p)
                seen.add(p.key)
        if len(picked) < want:
            return []
        self.projected = []
        return picked

    def _pick(self, ranked: list[Program], want: int) -> list[Program]:
        """The best unmeasured ``1 - epsilon`` share by rank, the rest by roulette; all buildable.

        A design space not measured yet goes first with its analytical choices, or its best-ranked
        program, all within the greedy share however large epsilon makes the roulette's: a small
        task's first round is often the only one the task scheduler gives it, and a space with one
        program (a row reduction's) would lose every pick to the samples of the larger spaces.
        Programs projected from other tasks alternate with those leaders, so that a round cut short
        (past the deadline) measures one of each: a projection from another shape can be far off
        (SqueezeNet's 3-channel first convolution ran 20 ms, 2 GFLOPS, on one).
        """
        lead, rest = untried_spaces_first(
            [p for p in ranked if p.key not in self.measured],
            {k[0] for k in self.measured},
            self.analytical,
        )
        fresh, self.projected = unique(alternate(self.projected, lead) + rest), []
        greedy = max(int(round(want * (1 - self.epsilon))), min(len(lead), want))
        picked: list[Program] = []
        seen = set(self.measured)  # keys after building: TVM may normalize compute locations
        while fresh and len(picked) < want:
            p = fresh.pop(0) if len(picked) < greedy else take_roulette(fresh, self.rng)
            if self._build([p]) and p.key not in seen:
                picked.append(p)
                seen.add(p.key)
        if len(picked) < want:  # the population converged: top up with constrained-random programs
            for p in self._build(self._fresh(2 * (want - len(picked)))):
                if len(picked) < want and p.key not in seen:
                    picked.append(p)
                    seen.add(p.key)
        return picked


def _task_logger(task_name: str) -> logging.Logger:
    """The per-task logger ``tune_tir`` created (its file is in the work dir); TuneContext hides it
    from Python."""
    pattern = re.compile(
        r"tvm\.s_tir\.meta_schedule\.logging\.task_\d+_" + re.escape(task_name[:100]) + "$"
    )
    names = [n for n in logging.root.manager.loggerDict if pattern.match(n)]
    return logging.getLogger(names[-1] if names else "tvm.s_tir.meta_schedule")


class _Timer:
    def __init__(self, into: dict, what: str):
        self.into, self.what = into, what

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.into[self.what] += time.perf_counter() - self.start
