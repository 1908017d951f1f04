"""HeronSearch: Heron's constrained genetic algorithm (CGA) as a MetaSchedule search strategy.

Every program it proposes is a CP-SAT solution of its design space's ConstraintModel, so every
candidate is valid by construction. Per round (Heron §4):

1. population = last round's survivors + measured elite + fresh constrained-random samples;
2. ``generations`` times: roulette-select parents by predicted score; each child fixes the key
   variables (picked by the decision model's split gains, else at random) to one parent's value or
   the other's, leaves one key free (the mutation) and lets CP-SAT re-solve the rest;
3. drop duplicates and measured programs; measure the best ``1 - epsilon`` by prediction plus an
   ``epsilon`` share picked by roulette.

Two cost models rank candidates: MetaSchedule's XGBoost on program features (the one the task
scheduler trains) and :class:`DecisionModel` on the decision vector. Each round both predict the
batch before it is measured; whichever ordered the last rounds better (Spearman's rho) ranks the
next one. Round 0 is constrained-random: no prediction means anything before measurements exist.
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
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
    replay,
    values_from_trace,
)
from ..records import record_seconds
from .decision_model import DecisionModel, rank_correlation

FEATURES, DECISIONS = "program-features", "decision-vector"
#: Rounds of ranking quality that decide which cost model ranks the next round.
QUALITY_WINDOW = 3
VALIDITY_ONLY = ConstraintOptions(parallel_jobs=False, cache_capacity=False)


@dataclass(eq=False)
class _Program:
    space: int
    values: dict
    score: float = 0.0
    #: The replayed, post-processed candidate; False when a postproc rejected it.
    candidate: object = None
    predicted: dict = field(default_factory=dict)  # cost model name -> score at pick time

    @property
    def key(self) -> tuple:
        return (self.space, tuple(sorted(self.values.items())))


@dataclass
class RoundStats:
    """What one round did; logged through MetaSchedule's task logger and kept in ``HeronSearch.stats``."""

    round: int
    sampled: int = 0  # CP-SAT solutions drawn (fresh samples and children)
    measured: int = 0
    valid: int = 0
    ranked_by: str = ""
    rank_correlation: dict = field(default_factory=dict)  # cost model name -> rho on this batch
    best_seconds: float = float("inf")  # best seconds so far
    seconds: dict = field(default_factory=lambda: defaultdict(float))  # solver / replay / cost model / measure

    def line(self) -> str:
        rho = ", ".join(f"{k} {v:+.2f}" for k, v in self.rank_correlation.items() if not math.isnan(v)) or "n/a"
        secs = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        best = f"{self.best_seconds * 1e3:.4f} ms" if self.best_seconds < float("inf") else "none"
        return (
            f"HeronSearch round {self.round}: sampled {self.sampled}, measured {self.measured}, "
            f"valid {self.valid}/{self.measured}, ranked by {self.ranked_by}, rank correlation [{rho}], "
            f"best so far {best}; time: {secs}"
        )


@derived_object
class HeronSearch(PySearchStrategy):
    """Constrained genetic search over HeronSpace's (or any traced) design spaces."""

    def __init__(
        self,
        population: int = 64,
        generations: int = 3,
        epsilon: float = 0.4,
        key_ratio: float = 0.2,
        elite: int = 8,
    ):
        self.population = population
        self.generations = generations
        self.epsilon = epsilon
        self.key_ratio = key_ratio
        self.elite = elite

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self.mod = context.mod
        self.target = context.target
        self.postprocs = list(context.space_generator.postprocs)
        self.seed = int(context.rand_state) if int(context.rand_state) >= 0 else 0
        self.logger = _task_logger(context.task_name)

    # -- MetaSchedule interface ---------------------------------------------------------------

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        self.rng = random.Random(self.seed)
        self.max_trials, self.per_round = int(max_trials), int(num_trials_per_iter)
        self.cost_model = cost_model
        self.traces, self.models = self._constrained_spaces(design_spaces)
        self.solvers = [Solver(m, seed=self.seed + i) for i, m in enumerate(self.models)]
        self.decision_models = [DecisionModel(m.primary, seed=self.seed) for m in self.models]
        self.trials = 0
        self.measured: dict[tuple, float] = {}  # program key -> seconds (inf when it failed)
        self.quality: dict[str, list[float]] = {FEATURES: [], DECISIONS: []}
        self.pool: list[_Program] = []
        self.stats: list[RoundStats] = []
        self.now = RoundStats(round=-1)  # the warm start's time goes here, unlogged
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
                self.logger.warning("HeronSearch skips design space %d: %s: %s", index, type(err).__name__, err)
                continue
            traces.append(space.trace.simplified(remove_postproc=True))
            models.append(model)
        if not models:
            raise Infeasible(
                f"HeronSearch: none of the {len(design_spaces)} design spaces of task {self.context.task_name!r} "
                "has a solvable constraint model (see the task log for why); tune it with "
                "strategy='evolutionary' or report the workload"
            )
        return traces, models

    def _solvable_model(self, space, index: int) -> ConstraintModel:
        """The space's full model, or its validity constraints alone when the performance
        constraints leave no solution (the space may still hold the best program)."""
        model = derive(space, self.target)
        try:
            Solver(model, seed=self.seed).sample()
        except Infeasible:
            model = derive(space, self.target, VALIDITY_ONLY)
            Solver(model, seed=self.seed).sample()
            self.logger.warning("HeronSearch: design space %d has no program within its performance "
                                "constraints; searching it under its validity constraints only", index)
        return model

    def post_tuning(self) -> None:
        self.pool = []

    def generate_measure_candidates(self):
        if self.trials >= self.max_trials:
            return None
        self.now = RoundStats(round=len(self.stats), ranked_by=self._ranking_model())
        want = min(self.per_round, self.max_trials - self.trials)
        picked = self._pick(self._evolve(), want)
        self._predict_all(picked)
        self.pending = picked
        self.trials += len(picked)
        self.measure_started = time.perf_counter()
        return [p.candidate for p in picked] or None

    def notify_runner_results(self, measure_candidates, results) -> None:
        stats = self.now
        stats.seconds["measure"] += time.perf_counter() - self.measure_started
        secs = []
        for program, result in zip(self.pending, results):
            secs.append(record_seconds(result.run_secs) if result.error_msg is None else float("inf"))
            self.measured[program.key] = secs[-1]
        throughput = [0.0 if s == float("inf") else 1.0 / s for s in secs]
        for name in self.quality:
            predicted = [p.predicted.get(name) for p in self.pending]
            if all(x is not None for x in predicted):
                rho = rank_correlation(predicted, throughput)
                stats.rank_correlation[name] = rho
                if not math.isnan(rho):
                    self.quality[name].append(rho)
        with self._timed("cost model"):
            self._fit_decision_models({p.space for p in self.pending})
        stats.measured, stats.valid = len(secs), sum(s < float("inf") for s in secs)
        stats.best_seconds = min(self.measured.values(), default=float("inf"))
        self.stats.append(stats)
        self.logger.info(stats.line())

    def clone(self):
        return HeronSearch(self.population, self.generations, self.epsilon, self.key_ratio, self.elite)

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
                program = _Program(space, values)
                self.measured[program.key] = record_seconds(record.run_secs)
                ok = self.measured[program.key] < float("inf")
                if self._build([program]):
                    programs.append(program)
                    results.append(RunnerResult(run_secs=record.run_secs, error_msg=None if ok else "failed earlier"))
                break
        if programs and self.cost_model is not None:
            self.cost_model.update(self.context, [p.candidate for p in programs], results)
        self._fit_decision_models(set(range(len(self.models))))
        self.logger.info(
            "HeronSearch warm start: %d of %d earlier records belong to these design spaces; they are not measured again",
            len(self.measured), len(records),
        )

    # -- cost models ----------------------------------------------------------------------------

    def _ranking_model(self) -> str:
        """The model whose recent predictions ordered measured batches best; Heron's by default."""
        recent = {name: np.mean(q[-QUALITY_WINDOW:]) for name, q in self.quality.items() if q}
        if len(recent) == 2:
            return max(recent, key=recent.get)
        if any(m.trained for m in self.decision_models):
            return DECISIONS
        return FEATURES

    def _fit_decision_models(self, spaces: set[int]) -> None:
        best = min(self.measured.values(), default=float("inf"))
        for space in spaces:
            rows = [(dict(k[1]), s) for k, s in self.measured.items() if k[0] == space]
            scores = [0.0 if s == float("inf") else best / s for _, s in rows]
            self.decision_models[space].fit([v for v, _ in rows], scores)

    def _predict(self, name: str, programs: list[_Program]) -> list[float] | None:
        """Scores by one cost model, or None where it cannot predict yet."""
        if not programs or not self.measured:
            return None
        if name == FEATURES:
            if self.cost_model is None:
                return None
            self._build(programs)
            with self._timed("cost model"):
                return [float(x) for x in self.cost_model.predict(self.context, [p.candidate for p in programs])]
        out = [0.0] * len(programs)
        with self._timed("cost model"):
            for space in {p.space for p in programs}:
                model = self.decision_models[space]
                if not model.trained:
                    return None
                members = [i for i, p in enumerate(programs) if p.space == space]
                for i, s in zip(members, model.predict([programs[i].values for i in members])):
                    out[i] = float(s)
        return out

    def _rank(self, programs: list[_Program]) -> list[_Program]:
        """Programs (with candidates when the feature model ranks them), best predicted first."""
        if not self.measured:
            return programs  # round 0: constrained-random
        if self.now.ranked_by == FEATURES:
            programs = self._build(programs)
        scores = self._predict(self.now.ranked_by, programs)
        for p, s in zip(programs, scores or [0.0] * len(programs)):
            p.score = s
        return sorted(programs, key=lambda p: -p.score)

    def _predict_all(self, picked: list[_Program]) -> None:
        for name in self.quality:
            scores = self._predict(name, picked)
            for p, s in zip(picked, scores or []):
                p.predicted[name] = s

    # -- the CGA --------------------------------------------------------------------------------

    def _timed(self, what: str):
        return _Timer(self.now.seconds, what)

    def _fresh(self, n: int) -> list[_Program]:
        out = []
        with self._timed("solver"):
            for _ in range(n):
                space = self.rng.randrange(len(self.models))
                try:
                    out.append(_Program(space, self.solvers[space].sample()))
                except Infeasible:
                    continue
        self.now.sampled += len(out)
        return out

    def _build(self, programs: list[_Program]) -> list[_Program]:
        """Replay + postprocs for programs without a candidate yet; returns those that pass."""
        with self._timed("replay"):
            for p in programs:
                if p.candidate is None:
                    p.candidate = self._candidate(p)
        return [p for p in programs if p.candidate is not False]

    def _candidate(self, program: _Program):
        model = self.models[program.space]
        try:
            sch = replay(model, self.traces[program.space], self.mod, program.values)
        except RepairedDecision:
            return False
        program.values = decided_values(model, sch.trace)  # compute locations as TVM normalized them
        sch.enter_postproc()  # as MetaSchedule does: records' traces then split into space and postprocs
        if not all(p.apply(sch) for p in self.postprocs):
            return False
        return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def _elite(self) -> list[_Program]:
        done = sorted((s, k) for k, s in self.measured.items() if s < float("inf"))
        return [_Program(k[0], dict(k[1])) for _, k in done[: self.elite]]

    def _keys(self, space: int) -> list[str]:
        """Key variables of a crossover: drawn by split gain when the decision model has some."""
        names = self.models[space].primary
        if not names:
            return []  # a design space without decisions: one program, nothing to cross
        count = max(1, round(self.key_ratio * len(names)))
        gains = self.decision_models[space].importance()
        weights = [gains.get(n, 0.0) for n in names]
        if sum(weights) <= 0:
            return self.rng.sample(names, count)
        floor = 0.05 * sum(weights) / len(names)  # unimportant variables still get a small chance
        chosen: list[str] = []
        pool = list(zip(names, [w + floor for w in weights]))
        while pool and len(chosen) < count:
            name = self.rng.choices([n for n, _ in pool], weights=[w for _, w in pool])[0]
            chosen.append(name)
            pool = [(n, w) for n, w in pool if n != name]
        return chosen

    def _crossover(self, a: _Program, b: _Program) -> _Program | None:
        """Keys are fixed to either parent's value, one key is left free (the mutation), every other
        variable is hinted from either parent: CP-SAT returns the nearest valid mix."""
        keys = self._keys(a.space)
        if not keys:
            return None
        free = self.rng.choice(keys)
        parent = {n: (a.values if self.rng.random() < 0.5 else b.values)[n] for n in a.values}
        fixed = {k: parent[k] for k in keys if k != free}
        hints = {n: v for n, v in parent.items() if n != free}
        try:
            with self._timed("solver"):
                child = _Program(a.space, self.solvers[a.space].complete(fixed, hints=hints))
        except Infeasible:
            return None
        self.now.sampled += 1
        return child

    def _roulette(self, ranked: list[_Program], k: int) -> list[_Program]:
        scores = np.asarray([p.score for p in ranked], dtype=float)
        weights = scores - scores.min() + 1e-9
        return self.rng.choices(ranked, weights=weights.tolist(), k=k)

    def _evolve(self) -> list[_Program]:
        ranked = self._rank(_unique(self.pool + self._elite() + self._fresh(self.population)))
        for _ in range(self.generations if self.measured else 0):
            children = []
            for _ in range(self.population):
                a, b = self._roulette(ranked, 2)
                child = self._crossover(a, b if a.space == b.space else a)
                if child is not None:
                    children.append(child)
            ranked = self._rank(_unique(children + self._elite()))
        self.pool = ranked[: self.population]
        return ranked

    def _pick(self, ranked: list[_Program], want: int) -> list[_Program]:
        """The best unmeasured ``1 - epsilon`` share by rank, the rest by roulette; all buildable."""
        fresh = [p for p in ranked if p.key not in self.measured]
        greedy = int(round(want * (1 - self.epsilon)))
        picked: list[_Program] = []
        seen = set(self.measured)  # keys after building: TVM may normalize compute locations
        while fresh and len(picked) < want:
            p = fresh.pop(0) if len(picked) < greedy else self._take_roulette(fresh)
            if self._build([p]) and p.key not in seen:
                picked.append(p)
                seen.add(p.key)
        if len(picked) < want:  # the population converged: top up with constrained-random programs
            for p in self._build(self._fresh(2 * (want - len(picked)))):
                if len(picked) < want and p.key not in seen:
                    picked.append(p)
                    seen.add(p.key)
        return picked

    def _take_roulette(self, rest: list[_Program]) -> _Program:
        choice = self._roulette(rest, 1)[0]
        rest.remove(choice)
        return choice


def _task_logger(task_name: str) -> logging.Logger:
    """The per-task logger ``tune_tir`` created (its file is in the work dir); TuneContext hides it from Python."""
    pattern = re.compile(r"tvm\.s_tir\.meta_schedule\.logging\.task_\d+_" + re.escape(task_name[:100]) + "$")
    names = [n for n in logging.root.manager.loggerDict if pattern.match(n)]
    return logging.getLogger(names[-1] if names else "tvm.s_tir.meta_schedule")


class _Timer:
    def __init__(self, into: dict, what: str):
        self.into, self.what = into, what

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.into[self.what] += time.perf_counter() - self.start


def _unique(programs: list[_Program]) -> list[_Program]:
    seen, out = set(), []
    for p in programs:
        if p.key not in seen:
            seen.add(p.key)
            out.append(p)
    return out
