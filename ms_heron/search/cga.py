"""HeronSearch: Heron's constrained genetic algorithm (CGA) as a MetaSchedule search strategy.

Every program it proposes is a CP-SAT solution of its design space's ConstraintModel, so every
candidate is valid by construction. Per round (Heron §4, sizes tuned down for 2-core machines):

1. population = survivors + measured elite + fresh constrained-random samples;
2. ``generations`` times: roulette-select parents by predicted score; each child fixes the key
   variables to one parent's value or the other's, leaves one key free (the mutation) and lets
   CP-SAT re-solve the rest; children and the elite form the next population;
3. drop duplicates and measured programs; measure the best ``1 - epsilon`` by prediction plus an
   ``epsilon`` share picked by roulette.

The cost model is the one MetaSchedule hands over (XGBoost on its per-store program features).
Round 0 is constrained-random: predictions are meaningless until measurements exist.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy

from ..constraints import ConstraintModel, Infeasible, RepairedDecision, Solver, derive, replay


@dataclass
class _Program:
    space: int
    values: dict
    score: float = 0.0

    @property
    def key(self) -> tuple:
        return (self.space, tuple(sorted(self.values.items())))


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

    # -- MetaSchedule interface ---------------------------------------------------------------

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        self.rng = random.Random(self.seed)
        self.max_trials, self.per_round = int(max_trials), int(num_trials_per_iter)
        self.cost_model = cost_model
        self.traces = [s.trace.simplified(remove_postproc=True) for s in design_spaces]
        self.models: list[ConstraintModel] = [derive(s, self.target) for s in design_spaces]
        self.solvers = [Solver(m, seed=self.seed + i) for i, m in enumerate(self.models)]
        self.trials = 0
        self.measured: dict[tuple, float] = {}  # program key -> seconds (inf when it failed)
        self.pool: list[_Program] = []
        self.round = 0

    def post_tuning(self) -> None:
        self.pool = []

    def generate_measure_candidates(self):
        if self.trials >= self.max_trials:
            return None
        want = min(self.per_round, self.max_trials - self.trials)
        population = self._evolve()
        picked = self._pick(population, want)
        self.pending = picked
        self.trials += len(picked)
        self.round += 1
        return [c for _, c in picked] or None

    def notify_runner_results(self, measure_candidates, results) -> None:
        for (program, _), result in zip(self.pending, results):
            secs = [float(x) for x in (result.run_secs or [])]
            ok = result.error_msg is None and secs
            self.measured[program.key] = float(np.mean(secs)) if ok else float("inf")

    def clone(self):
        return HeronSearch(self.population, self.generations, self.epsilon, self.key_ratio, self.elite)

    # -- the CGA --------------------------------------------------------------------------------

    def _fresh(self, n: int) -> list[_Program]:
        out = []
        for _ in range(n):
            space = self.rng.randrange(len(self.models))
            try:
                out.append(_Program(space, self.solvers[space].sample()))
            except Infeasible:
                continue
        return out

    def _candidate(self, program: _Program):
        """Replay + postprocs: the MeasureCandidate of a program, or None if a postproc rejects it."""
        try:
            sch = replay(self.models[program.space], self.traces[program.space], self.mod, program.values)
        except RepairedDecision:
            return None
        if not all(p.apply(sch) for p in self.postprocs):
            return None
        return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def _score(self, programs: list[_Program]) -> list[tuple[_Program, object]]:
        """Programs with their candidates, scored by the cost model (unscorable ones dropped)."""
        built = [(p, self._candidate(p)) for p in programs]
        built = [(p, c) for p, c in built if c is not None]
        if built and self.cost_model is not None and self.measured:
            scores = np.asarray(self.cost_model.predict(self.context, [c for _, c in built]), dtype=float)
            for (p, _), s in zip(built, scores):
                p.score = float(s)
        return built

    def _elite(self) -> list[_Program]:
        done = sorted((s, k) for k, s in self.measured.items() if s < float("inf"))
        return [_Program(k[0], dict(k[1])) for _, k in done[: self.elite]]

    def _crossover(self, a: _Program, b: _Program) -> _Program | None:
        names = self.models[a.space].primary
        keys = [n for n in names if self.rng.random() < self.key_ratio] or [self.rng.choice(names)]
        free = self.rng.choice(keys)  # the mutation slot
        fixed = {k: (a.values if self.rng.random() < 0.5 else b.values)[k] for k in keys if k != free}
        try:
            return _Program(a.space, self.solvers[a.space].complete(fixed, hints=a.values))
        except Infeasible:
            return None

    def _roulette(self, scored: list[_Program], k: int) -> list[_Program]:
        scores = np.asarray([p.score for p in scored], dtype=float)
        weights = scores - scores.min() + 1e-9
        return self.rng.choices(scored, weights=weights.tolist(), k=k)

    def _evolve(self) -> list[tuple[_Program, object]]:
        seeds = self.pool + self._elite() + self._fresh(self.population)
        scored = self._score(_unique(seeds))
        trained = bool(self.measured)
        for _ in range(self.generations if trained else 0):
            programs = [p for p, _ in scored]
            children = []
            for _ in range(self.population):
                a, b = self._roulette(programs, 2)
                if a.space != b.space:
                    b = a
                child = self._crossover(a, b)
                if child is not None:
                    children.append(child)
            scored = self._score(_unique(children + self._elite()))
        scored.sort(key=lambda pc: -pc[0].score)
        self.pool = [p for p, _ in scored[: self.population]]
        return scored

    def _pick(self, scored, want: int):
        fresh = [(p, c) for p, c in scored if p.key not in self.measured]
        greedy = int(round(want * (1 - self.epsilon)))
        picked, rest = fresh[:greedy], fresh[greedy:]
        while rest and len(picked) < want:
            choice = self._roulette([p for p, _ in rest], 1)[0]
            index = next(i for i, (p, _) in enumerate(rest) if p is choice)
            picked.append(rest.pop(index))
        return picked


def _unique(programs: list[_Program]) -> list[_Program]:
    seen, out = set(), []
    for p in programs:
        if p.key not in seen:
            seen.add(p.key)
            out.append(p)
    return out
