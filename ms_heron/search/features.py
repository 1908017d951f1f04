"""MetaSchedule's XGBoost cost model, on program features that stay finite.

``PerStoreFeature`` overflows to ``inf`` on loop nests past 2^64 iterations (a user's kernel can
have them), and XGBoost refuses a training matrix holding ``inf``: one such candidate stopped
tuning with a traceback. Clamping keeps every other feature as MetaSchedule computes it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.feature_extractor import PyFeatureExtractor

#: Features are log2-scaled counts; an overflowed one is read as 2^64, past any real loop nest.
OVERFLOWED = 64.0


@derived_object
class FiniteFeatures(PyFeatureExtractor):
    """``PerStoreFeature`` with ``inf`` clamped to :data:`OVERFLOWED` and ``nan`` to 0."""

    def __init__(self):
        super().__init__()
        self.inner = ms.feature_extractor.PerStoreFeature()

    def extract_from(self, context, candidates):
        return [
            tvm.runtime.tensor(
                np.nan_to_num(f.numpy(), nan=0.0, posinf=OVERFLOWED, neginf=-OVERFLOWED)
            )
            for f in self.inner.extract_from(context, candidates)
        ]


def xgb_cost_model(*, num_warmup_samples: int = 100) -> ms.cost_model.XGBModel:
    """MetaSchedule's default cost model (``"xgb"``), on :class:`FiniteFeatures`; it guesses at
    random until it holds ``num_warmup_samples`` programs (MetaSchedule's default; 0 for a model
    whose booster was trained elsewhere)."""
    return ms.cost_model.XGBModel(extractor=FiniteFeatures(), num_warmup_samples=num_warmup_samples)
