"""The constraint model of one design space: variables per sampled decision, named constraints.

Every constraint exists twice, on purpose: as CP-SAT constraints (to sample and complete) and as a
Python predicate over a concrete assignment (to say *which* constraint a decision set breaks).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ortools.sat.python import cp_model
from tvm.s_tir.schedule import Instruction

Values = dict  # variable name -> int
DecisionKind = Literal["tile", "categorical", "location"]
#: What a constraint limits: tiles multiplying to the extent, a categorical's range, parallel jobs
#: covering the cores, vector lanes, registers of the micro-kernel, bytes in a memory level,
#: threads.
ConstraintKind = Literal[
    "split", "candidates", "parallel", "vector", "register", "memory", "L1", "L2", "threads"
]
#: The stages of a design space's analytical choice (BLIS's model, Low et al. TOMS 2016) that every
#: blocking shares, maximized one after another, each held at its optimum while the next is
#: maximized: no more loads than FMAs per micro-kernel step, then the register micro-tile's
#: accumulators, then the fewest cache lines per step. Loads come before accumulators: on AVX2's 16
#: registers the most accumulators are a 14 x 1-vector tile, load-bound, which ran 1.2-2.4x slower
#: than 4 x 2 vectors on ResNet-50's convolutions (Zen 3).
ObjectiveStage = Literal[
    "loads", "registers", "lines", "traffic", "L1", "L2", "whole_reduction", "sweep", "contiguous"
]
OBJECTIVE_STAGES: tuple[ObjectiveStage, ...] = ("loads", "registers", "lines")
#: How the analytical choice fills the spatial loops between the two reduction levels: one choice
#: per blocking, each with its own stages after the shared ones. ``cache_block``: the fewest bytes
#: all parallel jobs read together (``traffic``), the largest ``KC`` within half of L1, then BLIS's
#: ``MC x KC`` and ``KC x NC`` blocks within half of L2, swept by the micro-tiles inside each KC
#: step (a large GEMM reuses its weight panel so). ``whole_reduction``: no spatial loop between the
#: reduction levels, so each micro-tile runs its whole reduction and its fused epilogue before the
#: next one (a 1x1 convolution with K = 128 ran 0.56 ms so, 0.64-0.74 ms blocked, on Zen 3); then
#: a sweep of the loops around the reduction reads no more than L2 (it re-reads a job's weight
#: columns once per row of micro-tiles: ResNet-50's stage-4 Winograd GEMM, 1 MB of weight per tile
#: position, ran 1.58 ms sweeping more than L2 per row, 0.98 ms sweeping what fits), then
#: ``traffic`` and ``L1``. Both are measured. Both end with ``contiguous``: of micro-tiles equal in
#: all else, the one whose rows run along the innermost spatial loop (an NHWC image's width, one
#: stream of broadcasts and stores instead of one per image row).
Blocking = Literal["cache_block", "whole_reduction"]
BLOCKING_STAGES: dict[Blocking, tuple[ObjectiveStage, ...]] = {
    "cache_block": ("traffic", "L1", "L2", "contiguous"),
    "whole_reduction": ("whole_reduction", "sweep", "traffic", "L1", "contiguous"),
}
#: CP-SAT's integer domain is int64; bounds of derived products are capped here (they stay sound:
#: a product of loop factors never comes near it).
MAX_BOUND = (1 << 62) - 1


@dataclass(kw_only=True, frozen=True)
class Decision:
    """One sampling instruction of the trace and the primary variables that decide it."""

    inst: Instruction
    #: "tile" (SamplePerfectTile), "categorical" (SampleCategorical: the trace holds an index into
    #: the candidates) or "location" (SampleComputeLocation: the trace holds the loop position
    #: itself).
    kind: DecisionKind
    variables: tuple[str, ...]
    #: tile: the loop extent; categorical and location: the candidate values.
    extent: int = 0
    candidates: tuple = ()

    def to_trace(self, values: Values):
        """The decision in the form ``Trace.with_decision`` takes."""
        if self.kind == "tile":
            return [int(values[v]) for v in self.variables]
        index = int(values[self.variables[0]])
        return int(self.candidates[index]) if self.kind == "location" else index

    def from_trace(self, decision) -> Values | None:
        """The inverse of :meth:`to_trace`; None when the trace holds a value outside the model."""
        if self.kind == "tile":
            return dict(zip(self.variables, (int(x) for x in decision)))
        value = int(decision)
        if self.kind == "location":
            if value not in self.candidates:
                return None
            value = self.candidates.index(value)
        return {self.variables[0]: value}


@dataclass(kw_only=True, frozen=True)
class Constraint:
    """One condition on a design space's values, named for messages and checkable in Python
    (the soundness tests and replay's repair check evaluate ``holds``; CP-SAT gets its own form)."""

    name: str
    kind: ConstraintKind
    holds: Callable[[Values], bool] = field(repr=False)
    #: Performance constraints can be switched off; validity constraints cannot.
    performance: bool = False


@dataclass(kw_only=True, frozen=True)
class Footprint:
    """A cache / scratchpad buffer's size in elements, as the derived variable ``variable``."""

    variable: str
    buffer: str
    scope: str
    dtype_bytes: int
    #: The tiled block whose loop the buffer is placed under.
    block: str
    #: The cache stage (block) that fills the buffer.
    stage: str | None = None


class ConstraintModel:
    """Variables, constraints and the CP-SAT model of one design space (see :mod:`.derive`)."""

    def __init__(self):
        self.cp = cp_model.CpModel()
        self.vars: dict[str, cp_model.IntVar] = {}
        self.decisions: list[Decision] = []
        self.constraints: list[Constraint] = []
        #: Derived quantities (products, footprints) as functions of the primary variables.
        self.derived: dict[str, Callable[[Values], int]] = {}
        self.footprints: list[Footprint] = []
        #: What a tiled block reads inside a tile level, held in a cache (scope "L1" / "L2").
        self.working_sets: list[Footprint] = []
        #: Values each primary variable may take.
        self.domains: dict[str, list[int]] = {}
        self._decision_of: dict[str, Decision] = {}
        #: Stage -> (CP-SAT variable, coefficient) terms to maximize, and the stage's caps (a term
        #: sum that must stay within a bound while it is maximized): see :data:`OBJECTIVE_STAGES`
        #: and :data:`BLOCKING_STAGES`.
        self.objectives: dict[str, list[tuple[cp_model.IntVar, int]]] = {}
        self.objective_caps: dict[
            str, list[tuple[tuple[tuple[cp_model.IntVar, int], ...], int]]
        ] = {}

    # -- building ---------------------------------------------------------------------------

    def new_var(
        self, name: str, values: Sequence[int] | None = None, lo: int = 0, hi: int = 0
    ) -> cp_model.IntVar:
        values = sorted(set(values)) if values is not None else list(range(lo, hi + 1))
        var = self.cp.NewIntVarFromDomain(cp_model.Domain.FromValues(values), name)
        self.vars[name] = var
        self.domains[name] = values
        return var

    def decision_of(self, variable: str) -> Decision | None:
        """The sampling decision a primary variable belongs to (None for derived variables)."""
        return self._decision_of.get(variable)

    def upper_bound(self, terms: Sequence) -> int:
        """A sound upper bound of the product of ``terms`` (variable names or ints).

        Factors sampled by one ``SamplePerfectTile`` multiply to at most its extent, so they are
        bounded together: the bound stays near the loop nest's size instead of overflowing int64.
        """
        bound, by_decision = 1, {}
        for t in terms:
            if isinstance(t, int):
                bound *= t
            else:
                by_decision.setdefault(self._decision_of.get(t), []).append(t)
        for decision, names in by_decision.items():
            most = math.prod(self.domains[n][-1] for n in names)
            bound *= (
                most if decision is None or decision.kind != "tile" else min(most, decision.extent)
            )
        return max(1, min(bound, MAX_BOUND))

    def product(
        self, name: str, terms: Sequence, upper: int | None = None
    ) -> cp_model.IntVar | int:
        """A variable equal to the product of ``terms`` (variable names or ints), chained
        pairwise."""
        upper = min(self.upper_bound(terms) if upper is None else upper, MAX_BOUND)
        const = math.prod(t for t in terms if isinstance(t, int))
        names = [t for t in terms if not isinstance(t, int)]
        if not names:
            return const
        acc = self.vars[names[0]]
        for i, other in enumerate(names[1:], 1):
            nxt = self.cp.NewIntVar(1, upper, f"{name}.p{i}")
            self.cp.AddMultiplicationEquality(nxt, [acc, self.vars[other]])
            acc = nxt
        if const != 1:
            scaled = self.cp.NewIntVar(1, upper, f"{name}.scaled")
            self.cp.Add(scaled == const * acc)
            acc = scaled
        self.derived[name] = lambda values, names=tuple(names), const=const: (
            const * math.prod(values[n] for n in names)
        )
        return acc

    def add_decision(self, decision: Decision) -> None:
        self.decisions.append(decision)
        for name in decision.variables:
            self._decision_of[name] = decision

    def multiply(self, target: cp_model.IntVar, variables: Sequence, upper: int, name: str) -> None:
        """``target == prod(variables)`` (CP-SAT variables), chained pairwise with bounded
        temporaries."""
        acc = variables[0]
        for i, var in enumerate(variables[1:], 1):
            nxt = self.cp.NewIntVar(1, max(1, min(upper, MAX_BOUND)), f"{name}.acc{i}")
            self.cp.AddMultiplicationEquality(nxt, [acc, var])
            acc = nxt
        self.cp.Add(target == acc)

    def product_of_dims(self, name: str, dims: Sequence) -> None:
        """The derived variable ``name``: the product of a buffer's dims, ``(variable, upper, fn)``
        each."""
        upper = max(1, min(math.prod(u for _, u, _ in dims), MAX_BOUND))
        total = self.cp.NewIntVar(1, upper, name)
        self.multiply(total, [d for d, _, _ in dims], upper, name)
        self.vars[name] = total
        self.derived[name] = lambda v, fns=tuple(f for _, _, f in dims): math.prod(
            fn(v) for fn in fns
        )

    def add(self, constraint: Constraint) -> None:
        self.constraints.append(constraint)

    def maximize(self, stage: ObjectiveStage, terms, cap: int | None = None) -> None:
        """Add ``terms`` ((variable, coefficient) pairs) to what the analytical choice maximizes at
        ``stage``; with ``cap``, their sum stays within it while the stage is maximized."""
        terms = tuple(terms)
        self.objectives.setdefault(stage, []).extend(terms)
        if cap is not None:
            self.objective_caps.setdefault(stage, []).append((terms, cap))

    # -- using --------------------------------------------------------------------------------

    @property
    def primary(self) -> list[str]:
        return [v for d in self.decisions for v in d.variables]

    def evaluate(self, values: Values) -> Values:
        """``values`` plus every derived quantity."""
        full = dict(values)
        for name, fn in self.derived.items():
            full[name] = fn(full)
        return full

    def violations(self, values: Values, performance: bool = True) -> list[str]:
        """Names of the constraints the assignment breaks (empty: valid)."""
        full = self.evaluate(values)
        return [
            c.name
            for c in self.constraints
            if (performance or not c.performance) and not c.holds(full)
        ]

    def summary(self) -> dict:
        """Sizes for logs and reports: variables, constraints by kind, size of the space."""
        size = 1
        for d in self.decisions:
            size *= _tilings(d.extent, len(d.variables)) if d.kind == "tile" else len(d.candidates)
        return {
            "decisions": len(self.decisions),
            "variables": len(self.primary),
            "cp_sat_variables": len(self.cp.Proto().variables),
            "constraints": dict(Counter(c.kind for c in self.constraints)),
            "unconstrained_space_size": size,
        }


def _tilings(extent: int, parts: int) -> int:
    """Number of ordered factorizations of ``extent`` into ``parts`` factors."""
    if parts == 1:
        return 1
    return sum(_tilings(extent // d, parts - 1) for d in divisors(extent))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
