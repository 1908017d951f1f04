"""Which programs look fastest: two cost models, and the arbitration between them.

MetaSchedule's XGBoost reads program features of the replayed candidate (the model the task
scheduler trains); :class:`DecisionModel` reads the decision vector of one design space. Each
round both predict the batch before it is measured; whichever ordered the last rounds better
(Spearman's rho over a window of rounds) ranks the next one.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from .decision_model import DecisionModel, rank_correlation
from .genetic import Program

#: The two cost models: MetaSchedule's XGBoost on program features, Heron's on decision values.
CostModelName = Literal["program-features", "decision-vector"]
FEATURES: CostModelName = "program-features"
DECISIONS: CostModelName = "decision-vector"
#: Rounds of ranking quality that decide which cost model ranks the next round.
QUALITY_WINDOW = 3


class Ranking:
    """Both cost models of a task and the record of how well each ordered the measured rounds."""

    def __init__(self, variables_per_space: list[list[str]], seed: int, cost_model=None):
        #: MetaSchedule's cost model on program features (None: not given by the task scheduler).
        self.cost_model = cost_model
        self.decision_models = [DecisionModel(v, seed=seed) for v in variables_per_space]
        self.quality: dict[str, list[float]] = {FEATURES: [], DECISIONS: []}

    def ranking_model(self) -> CostModelName:
        """The model whose recent predictions ordered measured batches best.

        Heron's decision model ranks only once it can score every design space (one tree ensemble
        per space, each needing its own measurements); until then a population mixing spaces would
        be ranked by zeros, i.e. not at all, so the feature model, which reads any program, ranks.
        """
        if not self.decisions_cover_every_space():
            return DECISIONS if self.cost_model is None else FEATURES
        recent = {name: np.mean(q[-QUALITY_WINDOW:]) for name, q in self.quality.items() if q}
        if len(recent) == 2:
            return max(recent, key=recent.get)
        # it ordered this task better than chance; the other is unjudged
        if recent.get(FEATURES, 0.0) > 0:
            return FEATURES
        return DECISIONS

    def decisions_cover_every_space(self) -> bool:
        return all(m.trained or not m.variables for m in self.decision_models)

    def features_trained(self, programs: list[Program], context) -> bool:
        """Whether the feature model has learned anything: MetaSchedule's XGBModel predicts uniform
        noise until it has seen enough measurements, so two predictions of the same built programs
        then differ; a trained model repeats itself."""
        if self.cost_model is None or len(programs) < 2:
            return False
        return self.predict(FEATURES, programs, context) == self.predict(
            FEATURES, programs, context
        )

    def fit(self, measured: dict[tuple, float], spaces: set[int]) -> None:
        """Refit the decision models of ``spaces`` on every measured program (key -> seconds)."""
        best = min(measured.values(), default=math.inf)
        for space in spaces:
            rows = [(dict(k[1]), s) for k, s in measured.items() if k[0] == space]
            scores = [0.0 if s == math.inf else best / s for _, s in rows]
            self.decision_models[space].fit([v for v, _ in rows], scores)

    def predict(self, name: str, programs: list[Program], context) -> list[float] | None:
        """Scores by one cost model, or None where it cannot predict yet (the feature model reads
        the programs' replayed candidates, so they must be built)."""
        if not programs:
            return None
        if name == FEATURES:
            if self.cost_model is None:
                return None
            return [
                float(x) for x in self.cost_model.predict(context, [p.candidate for p in programs])
            ]
        out = [0.0] * len(programs)
        for space in {p.space for p in programs}:
            model = self.decision_models[space]
            if not model.variables:
                continue  # one program, nothing to rank it by
            if not model.trained:
                return None
            members = [i for i, p in enumerate(programs) if p.space == space]
            for i, s in zip(members, model.predict([programs[i].values for i in members])):
                out[i] = float(s)
        return out

    def note_batch(self, programs: list[Program], seconds: list[float]) -> dict[str, float]:
        """How well each model's predictions (taken at pick time) ordered the measured batch."""
        throughput = [0.0 if s == math.inf else 1.0 / s for s in seconds]
        rhos = {}
        for name in self.quality:
            predicted = [p.predicted.get(name) for p in programs]
            if all(x is not None for x in predicted):
                rhos[name] = rank_correlation(predicted, throughput)
                if not math.isnan(rhos[name]):
                    self.quality[name].append(rhos[name])
        return rhos

    def importance(self, space: int) -> dict[str, float]:
        return self.decision_models[space].importance()
