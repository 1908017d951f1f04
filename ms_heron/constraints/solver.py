"""CP-SAT over a ConstraintModel: random samples, completion of partial assignments, validation.

The CpModel is built once per design space (by :func:`derive`); each query solves a copy with
a few equalities or hints added. Diversity comes from random hints on every primary variable,
a fresh random seed and randomized search per call (Heron's recipe); :func:`uniformity` measures
how close to a uniform sampler that comes.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from ortools.sat.python import cp_model

from .model import (
    BLOCKING_STAGES,
    OBJECTIVE_STAGES,
    Blocking,
    ConstraintModel,
    ObjectiveStage,
    Values,
)

#: CP-SAT's deterministic time (its count of work done, roughly seconds) for one stage of the
#: analytical choice. A stage's optimum is found within a few hundredths; a larger conv's
#: ``traffic`` stage then spends any wall-clock limit proving it (1 s per space), which on a
#: ResNet-50 was 70 of the set-up's 94 s, and a wall-clock cut-off made the choice depend on the
#: load.
STAGE_WORK = 0.05


class Infeasible(RuntimeError):
    """No assignment satisfies the model with the given fixed values."""


class Solver:
    """CP-SAT over one ConstraintModel: random solutions, completions of partly fixed values, and
    the solution nearest to a hint (how a draw that breaks a constraint is repaired)."""

    def __init__(self, model: ConstraintModel, seed: int = 0, time_limit_s: float = 5.0):
        self.model = model
        self.rng = random.Random(seed)
        self.time_limit_s = time_limit_s
        self._domains = {name: model.domains[name] for name in model.primary}

    def _solve(self, fixed: Values, hints: Values) -> Values | None:
        cp = self.model.cp.clone()
        variables = {
            name: cp.get_int_var_from_proto_index(var.Index())
            for name, var in self.model.vars.items()
        }
        for name, value in fixed.items():
            cp.Add(variables[name] == int(value))
        for name, value in hints.items():
            cp.AddHint(variables[name], int(value))
        solver = _cp_solver()
        params = solver.parameters
        params.random_seed = self.rng.randrange(1 << 30)
        params.randomize_search = True
        params.num_workers = 1
        params.cp_model_presolve = False
        params.max_time_in_seconds = self.time_limit_s
        status = solver.Solve(cp)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        return {name: int(solver.Value(variables[name])) for name in self.model.primary}

    def _random_hints(self, skip: Iterable[str] = ()) -> Values:
        """A random point to solve towards: each tiling drawn whole, the way TVM's
        ``SamplePerfectTile`` draws it (every prime factor of the extent goes to a uniformly random
        level), every other variable uniformly from its domain.

        Independent uniform draws per tile factor rarely multiply to the extent; CP-SAT's repair of
        such hints leaves most middle tile levels at 1, which collapses the cache blocking.
        """
        hints = {n: self.rng.choice(vals) for n, vals in self._domains.items()}
        for decision in self.model.decisions:
            if decision.kind == "tile":
                hints.update(
                    zip(
                        decision.variables,
                        _random_tiling(decision.extent, len(decision.variables), self.rng),
                    )
                )
        skip = set(skip)
        return {n: v for n, v in hints.items() if n not in skip}

    def sample(self) -> Values:
        """One random solution (primary variables)."""
        got = self._solve({}, self._random_hints())
        if got is None:
            raise Infeasible("the constraint model has no solution")
        return got

    def complete(self, fixed: Values, hints: Values | None = None) -> Values:
        """A solution that keeps ``fixed``; the other variables are re-solved (crossover,
        mutation)."""
        free_hints = self._random_hints(skip=fixed)
        free_hints.update(hints or {})
        got = self._solve(dict(fixed), {k: v for k, v in free_hints.items() if k not in fixed})
        if got is None:
            raise Infeasible(f"no solution keeps {fixed}")
        return got

    def analytical(self, stage_work: float = STAGE_WORK) -> dict[Blocking, Values]:
        """The solutions the analytical model picks, one per blocking: the model's objectives
        maximized stage after stage (:data:`~.model.OBJECTIVE_STAGES`, then the blocking's own
        :data:`~.model.BLOCKING_STAGES`; the best found within ``stage_work``, CP-SAT's
        deterministic time, so that the choice is the same on a loaded or a quiet machine). Empty
        when the model has no objective. A stage whose cap leaves no solution is skipped; what no
        stage decides is left to CP-SAT's deterministic search."""
        if not self.model.objectives:
            return {}
        cp, shared = self.model.cp.clone(), None
        for stage in OBJECTIVE_STAGES:
            cp, shared = self._maximize(cp, stage, shared, stage_work)
        choices = {}
        for blocking, stages in BLOCKING_STAGES.items():
            branch, solution = cp, shared
            for stage in stages:
                branch, solution = self._maximize(branch, stage, solution, stage_work)
            if solution is not None:
                choices[blocking] = solution
        return choices

    def _maximize(
        self, cp: cp_model.CpModel, stage: ObjectiveStage, solution: Values | None, work: float
    ):
        """``cp`` with ``stage``'s objective held at its optimum, and that optimum's solution;
        ``cp`` and ``solution`` unchanged when the stage has no terms or no solution within its
        caps."""
        terms = self.model.objectives.get(stage)
        if not terms:
            return cp, solution
        trial = cp.clone()
        for capped, cap in self.model.objective_caps.get(stage, []):
            trial.Add(_linear(trial, capped) <= cap)
        trial.Maximize(_linear(trial, terms))
        solver = _cp_solver()
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = work
        if solver.Solve(trial) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return cp, solution
        solution = {
            name: int(
                solver.Value(trial.get_int_var_from_proto_index(self.model.vars[name].Index()))
            )
            for name in self.model.primary
        }
        trial.ClearObjective()
        trial.Add(_linear(trial, terms) >= int(round(solver.ObjectiveValue())))
        return trial, solution

    def samples(self, n: int, max_tries: int | None = None) -> list[Values]:
        """Up to ``n`` distinct random solutions (fewer when the space is smaller)."""
        seen, out = set(), []
        for _ in range(max_tries or 4 * n):
            got = self.sample()
            key = tuple(sorted(got.items()))
            if key not in seen:
                seen.add(key)
                out.append(got)
                if len(out) == n:
                    break
        return out


def _linear(cp: cp_model.CpModel, terms):
    """``sum(coefficient * variable)`` over ``terms`` of the model ``cp`` was cloned from, in
    ``cp``."""
    return sum(cp.get_int_var_from_proto_index(var.Index()) * k for var, k in terms)


def _random_tiling(extent: int, levels: int, rng: random.Random) -> list[int]:
    factors = [1] * levels
    n, p = extent, 2
    while n > 1:
        while n % p == 0:
            factors[rng.randrange(levels)] *= p
            n //= p
        p = p + 1 if p * p <= n else n
    return factors


class _Counter(cp_model.CpSolverSolutionCallback):
    def __init__(self, variables, limit):
        super().__init__()
        self.variables, self.limit, self.seen = variables, limit, set()

    def on_solution_callback(self):
        self.seen.add(tuple(self.Value(v) for v in self.variables))
        if len(self.seen) >= self.limit:
            self.StopSearch()


def _cp_solver() -> cp_model.CpSolver:
    """A CP-SAT solver that leaves SIGINT alone: by default CP-SAT installs its own CTRL-C handler
    per solve and resets SIGINT to the default action afterwards, so the next CTRL-C would kill the
    tuning process instead of stopping it after the round in flight."""
    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False
    return solver


def maximum(model: ConstraintModel, variable, time_limit_s: float = 2.0) -> int | None:
    """The largest value ``variable`` (a variable of ``model.cp``) takes in a solution of the model
    (the best found within the time limit), or None if the model has no solution."""
    return _extreme(model, variable, time_limit_s, largest=True)


def minimum(model: ConstraintModel, variable, time_limit_s: float = 2.0) -> int | None:
    """The smallest value ``variable`` takes in a solution of the model, as :func:`maximum`."""
    return _extreme(model, variable, time_limit_s, largest=False)


def _extreme(model: ConstraintModel, variable, time_limit_s: float, *, largest: bool) -> int | None:
    cp = model.cp.clone()
    proto = cp.get_int_var_from_proto_index(variable.Index())
    if largest:
        cp.Maximize(proto)
    else:
        cp.Minimize(proto)
    solver = _cp_solver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = time_limit_s
    if solver.Solve(cp) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return int(solver.ObjectiveValue())


def count_solutions(model: ConstraintModel, limit: int = 100_000) -> int:
    """Distinct assignments of the primary variables that satisfy the model (up to ``limit``)."""
    solver = _cp_solver()
    solver.parameters.enumerate_all_solutions = True
    solver.parameters.cp_model_presolve = False
    solver.parameters.num_workers = 1
    counter = _Counter([model.vars[n] for n in model.primary], limit)
    solver.Solve(model.cp, counter)
    return len(counter.seen)


def uniformity(samples: list[Values], feasible: int) -> float:
    """Distinct solutions among ``samples`` over the number a uniform sampler would expect to see.

    1.0 means the sampler covers the ``feasible`` solutions as well as uniform draws would; lower
    means it keeps returning the same corners of the space (Heron's hinted sampling is not uniform).
    """
    n = len(samples)
    if not n or feasible < 1:
        return 1.0
    distinct = len({tuple(sorted(s.items())) for s in samples})
    expected = feasible * (1.0 - (1.0 - 1.0 / feasible) ** n)
    return distinct / expected
