"""Search strategies: Heron's constrained genetic algorithm."""

from .cga import HeronSearch

__all__ = ["HeronSearch"]
