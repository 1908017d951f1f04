"""Search strategies: Heron's constrained genetic algorithm, and a deadline/stopwatch wrapper for any strategy."""

from .cga import HeronSearch, RoundStats
from .watch import WatchedSearch

__all__ = ["HeronSearch", "RoundStats", "WatchedSearch"]
