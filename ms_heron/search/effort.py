"""How much search a round may afford: the share of its time spent generating and ranking
candidates.

A round's time is search (constrained samples, replaying them into schedules, the cost models) plus
measurement (build and run). HeronSearch's generations cost the same whatever the task, while a
round of 16 small kernels measures in a few seconds: tuning ResNet-50 for 15 minutes spent 340 s of
its 900 in search, 221 s of it replaying children into schedules for the feature model. Under a
wall-clock budget that is time no candidate is measured in. :class:`Effort` holds the search to a
share of each round by scaling the population and the generations, shared by a strategy and its
clones (one per task), so a model's later tasks start at the scale the earlier ones settled on.
"""

from __future__ import annotations

#: The scale never drops below this: a round still breeds from a population of a quarter.
MIN_SCALE = 0.25


class Effort:
    """A scale in [:data:`MIN_SCALE`, 1] on population and generations, kept near ``share`` of each
    round's time by :meth:`note_round`."""

    def __init__(self, share: float):
        self.share = share
        self.scale = 1.0

    def note_round(self, search_s: float, measure_s: float) -> None:
        """Shrink the scale after a round whose search took more than ``share`` of it (in
        proportion), grow it back after one that took less than half of that."""
        total = search_s + measure_s
        if total <= 0.0:
            return
        spent = search_s / total
        if spent > self.share:
            self.scale = max(MIN_SCALE, self.scale * max(0.5, self.share / spent))
        elif spent < self.share / 2:
            self.scale = min(1.0, self.scale * 1.25)

    def population(self, population: int, want: int) -> int:
        """Programs per generation at this scale, never fewer than twice the round's picks."""
        return max(2 * want, round(population * self.scale))

    def generations(self, generations: int) -> int:
        """Generations at this scale; at least one wherever the strategy breeds at all."""
        return min(generations, max(1, round(generations * self.scale)))
