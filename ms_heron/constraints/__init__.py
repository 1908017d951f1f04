"""Heron's constraint model for MetaSchedule design spaces, solved with OR-Tools CP-SAT."""

from .derive import derive
from .model import Constraint, ConstraintModel, Decision, Footprint
from .replay import (
    RepairedDecision,
    decided_values,
    decisions_of,
    native_sample,
    replay,
    values_from_trace,
)
from .solver import Infeasible, Solver, count_solutions, uniformity
from .walk import ConstraintOptions

__all__ = [
    "ConstraintModel",
    "ConstraintOptions",
    "Constraint",
    "Decision",
    "Footprint",
    "derive",
    "Solver",
    "Infeasible",
    "uniformity",
    "count_solutions",
    "replay",
    "decisions_of",
    "decided_values",
    "native_sample",
    "values_from_trace",
    "RepairedDecision",
]
