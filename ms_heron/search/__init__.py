"""Search strategies: Heron's constrained genetic algorithm over CP-SAT solutions, its cost models,
the transfer of tuned programs between tasks, and the task scheduler that shares a model's
budget."""

from .cga import HeronSearch, RoundStats

__all__ = ["HeronSearch", "RoundStats"]
