"""The genetic operators of Heron's CGA over constraint-solver values; no TVM in here.

A program is one design space's assignment of its constraint model's primary variables. Children
come from the CP-SAT solver, never from editing values directly, so every child satisfies the model:
the crossover fixes the key variables to either parent's value, leaves one key free (the mutation)
and hints every other variable from either parent; the solver returns the nearest valid mix.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np

from ..constraints import Infeasible, Solver


@dataclass(kw_only=True, eq=False)
class Program:
    """One point of the search: a design space and a CP-SAT solution of its constraint model."""

    space: int
    values: dict
    score: float = 0.0
    #: The replayed, post-processed candidate; False when a postproc rejected it.
    candidate: object = None
    predicted: dict = field(default_factory=dict)  # cost model name -> score at pick time

    @property
    def key(self) -> tuple:
        return (self.space, tuple(sorted(self.values.items())))


def unique(programs: list[Program]) -> list[Program]:
    """``programs`` without repeats, first occurrence kept."""
    seen, out = set(), []
    for p in programs:
        if p.key not in seen:
            seen.add(p.key)
            out.append(p)
    return out


def alternate(first: list[Program], second: list[Program]) -> list[Program]:
    """``first`` and ``second`` taken in turn, then the longer one's rest."""
    out = [p for pair in zip(first, second) for p in pair]
    return out + first[len(second) :] + second[len(first) :]


def untried_spaces_first(
    ranked: list[Program], tried: set[int], preferred: dict[int, list[Program]] | None = None
) -> tuple[list[Program], list[Program]]:
    """``ranked`` split into the programs that lead for the design spaces not in ``tried`` and the
    rest in rank order, each program once. The leaders: one per space first (its first ``preferred``
    program if it has some, its analytical choices, else its best-ranked one), then the spaces'
    other preferred programs."""
    preferred = {s: ps for s, ps in (preferred or {}).items() if s not in tried and ps}
    others: dict[int, Program] = {}
    for p in ranked:
        if p.space not in tried and p.space not in preferred:
            others.setdefault(p.space, p)
    lead = [
        *(ps[0] for ps in preferred.values()),
        *others.values(),
        *(p for ps in preferred.values() for p in ps[1:]),
    ]
    keys = {p.key for p in lead}  # a preferred program may also be among the ranked
    return lead, [p for p in ranked if p.key not in keys]


def space_weights(
    priors: list[float], best: dict[int, float], sharpness: float = 3.0, floor: float = 0.02
) -> list[float]:
    """How likely each design space is to get the next fresh sample.

    A space not measured yet keeps its prior; a measured one gets ``prior x (best overall / its
    best) ** sharpness`` (a space whose best program is 2x slower than the best gets an eighth of
    its prior), never less than ``floor`` of it, so that no space is dropped on a few unlucky draws.
    ``best`` maps a space to its fastest measured seconds (inf when nothing of it ran).
    """
    top = min((s for s in best.values() if s < math.inf), default=math.inf)
    weights = []
    for space, prior in enumerate(priors):
        if space not in best or top == math.inf:
            weights.append(prior)
        else:
            share = (top / best[space]) ** sharpness if best[space] < math.inf else 0.0
            weights.append(prior * max(floor, share))
    return weights


def roulette(ranked: list[Program], k: int, rng: random.Random) -> list[Program]:
    """``k`` draws weighted by score (shifted so the worst keeps a tiny chance)."""
    scores = np.asarray([p.score for p in ranked], dtype=float)
    weights = scores - scores.min() + 1e-9
    return rng.choices(ranked, weights=weights.tolist(), k=k)


def take_roulette(rest: list[Program], rng: random.Random) -> Program:
    """One roulette draw, removed from ``rest``."""
    choice = roulette(rest, 1, rng)[0]
    rest.remove(choice)
    return choice


def choose_keys(
    names: list[str], gains: dict[str, float], ratio: float, rng: random.Random
) -> list[str]:
    """Key variables of a crossover: ``ratio`` of ``names``, drawn by split gain when there are
    gains, else uniformly; an empty list for a space without decisions."""
    if not names:
        return []
    count = max(1, round(ratio * len(names)))
    weights = [gains.get(n, 0.0) for n in names]
    if sum(weights) <= 0:
        return rng.sample(names, count)
    floor = 0.05 * sum(weights) / len(names)  # unimportant variables still get a small chance
    chosen: list[str] = []
    pool = list(zip(names, [w + floor for w in weights]))
    while pool and len(chosen) < count:
        name = rng.choices([n for n, _ in pool], weights=[w for _, w in pool])[0]
        chosen.append(name)
        pool = [(n, w) for n, w in pool if n != name]
    return chosen


def crossover(
    a: Program, b: Program, keys: list[str], solver: Solver, rng: random.Random
) -> Program | None:
    """A child of ``a`` and ``b`` (same space) solved around ``keys``; None when no valid mix
    exists."""
    if not keys:
        return None
    free = rng.choice(keys)
    parent = {n: (a.values if rng.random() < 0.5 else b.values)[n] for n in a.values}
    fixed = {k: parent[k] for k in keys if k != free}
    hints = {n: v for n, v in parent.items() if n != free}
    try:
        return Program(space=a.space, values=solver.complete(fixed, hints=hints))
    except Infeasible:
        return None
