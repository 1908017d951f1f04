"""Heron's cost model: XGBoost on one design space's decision vector.

MetaSchedule's model reads program features of the lowered candidate, which transfers across tasks
but needs a replay and postprocs per prediction. Heron's model reads the sampled decisions
directly: it is cheap enough to rank every child of every generation, and its split gains say which
variables matter, which is how HeronSearch chooses the key variables of crossover.
"""

from __future__ import annotations

import math

import numpy as np

#: Fewer measurements than this and the tree ensemble only memorizes noise.
MIN_SAMPLES = 8


class DecisionModel:
    """Heron's cost model: gradient-boosted trees on one design space's decision values, whose
    split gains also pick the key variables crossover keeps."""

    def __init__(self, variables: list[str], seed: int = 0):
        self.variables = list(variables)
        self.seed = seed
        self.booster = None

    def features(self, values_list: list[dict]) -> np.ndarray:
        """log2 of each decision: tile factors multiply, so ratios are what trees should split
        on."""
        rows = [
            [math.log2(max(int(v[name]), 0) + 1) for name in self.variables] for v in values_list
        ]
        return np.asarray(rows, dtype=np.float32).reshape(len(values_list), len(self.variables))

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def fit(self, values_list: list[dict], scores: list[float]) -> None:
        """Train from scratch on all measurements; ``scores`` are throughputs normalized to the best
        (0: failed)."""
        if len(values_list) < MIN_SAMPLES or not self.variables:
            return
        import xgboost as xgb

        data = xgb.DMatrix(self.features(values_list), label=np.asarray(scores, dtype=np.float32))
        params = {
            "max_depth": 6,
            "eta": 0.2,
            "min_child_weight": 0,
            "seed": self.seed,
            "nthread": 1,
            "verbosity": 0,
        }
        self.booster = xgb.train(params, data, num_boost_round=60)

    def predict(self, values_list: list[dict]) -> np.ndarray:
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(self.features(values_list)))

    def importance(self) -> dict[str, float]:
        """Total split gain per variable (0 for variables the trees never split on)."""
        if not self.trained:
            return {}
        gains = self.booster.get_score(importance_type="total_gain")
        return {name: float(gains.get(f"f{i}", 0.0)) for i, name in enumerate(self.variables)}


def rank_correlation(predicted: list[float], measured: list[float]) -> float:
    """Spearman's rho: how well predictions order what was then measured (nan if undefined)."""
    if len(predicted) < 3:
        return float("nan")
    a, b = _ranks(np.asarray(predicted, dtype=float)), _ranks(np.asarray(measured, dtype=float))
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks, so that ties (e.g. several failed candidates) do not fake an ordering."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks
