"""A cost model that starts trained: MetaSchedule's XGBoost on program features, fitted beforehand
on this project's tuning records and shipped in the package, so that a new process ranks its first
round instead of sampling it at random.

Its targets are MetaSchedule's own, each program's speed relative to its task's fastest (min cost /
cost), so what it learned does not depend on one machine's absolute speed. MetaSchedule's XGBModel
refits from scratch on all its data; the records it learned from therefore travel with it (features
in float16, compressed), a run's measurements join them, and :class:`KeepsTraining` refits it each
time the run's own measurements have doubled (XGBModel's own rule, whenever all its data grew by a
fifth, would wait for thousands of them). ``bench/train_cost_model.py`` rebuilds the file from
record directories as they accumulate.

Tuning takes it with ``pretrained_model=True`` (``--pretrained-model``); it is not the default yet:
on MobileNetV2 at 2 minutes it did not beat the untrained model, which learns from the run's own
first programs (docs/rules.md).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

from .features import xgb_cost_model

#: The shipped model, in the package's data.
SHIPPED = "cost_model.npz"
#: A run's own measurements that first refit the model (a refit takes 1-3 s on 2 cores).
FIRST_REFIT = 64
#: Prefix of the shipped groups' keys: a run's own measurements of a task never join a group of
#: another machine's seconds (each group is normalized by its fastest).
GROUP_PREFIX = "pretrained "


class PretrainedModelMissing(FileNotFoundError):
    """The file of a pretrained cost model is not there; the message names the fix."""


@dataclass(frozen=True, kw_only=True)
class PretrainedInfo:
    """What the shipped model learned from, as its file says (the training script writes it)."""

    #: Programs and tasks it was fitted on.
    programs: int
    tasks: int
    #: Mean Spearman rank correlation of its predictions with measured speed on held-out tasks.
    held_out_rho: float
    #: The CPUs that measured the records, and the commit of the code that fitted the model.
    cpus: tuple[str, ...]
    commit: str


def shipped_path() -> Path:
    return Path(str(resources.files("ms_heron") / "data" / SHIPPED))


@derived_object
class KeepsTraining(PyCostModel):
    """``inner`` (an XGBModel holding ``pretrained`` records) refitted on all its data when the
    run's own measurements reach :data:`FIRST_REFIT`, and each time they have doubled since."""

    def __init__(self, inner: ms.cost_model.XGBModel, pretrained: int):
        super().__init__()
        self.inner, self.pretrained, self.fitted_own = inner, pretrained, 0

    def load(self, path: str) -> None:
        self.inner.load(path)

    def save(self, path: str) -> None:
        self.inner.save(path)

    def update(self, context, candidates, results) -> None:
        own = self.inner.data_size - self.pretrained + len(candidates)
        due = own >= max(FIRST_REFIT, 2 * self.fitted_own)
        # XGBModel refits unless its data grew by less than a fifth of last_train_size: 0 makes it
        # refit, the size it is about to reach makes it wait
        self.inner.last_train_size = 0 if due else self.inner.data_size + len(candidates)
        self.inner.update(context, candidates, results)
        if due:
            self.fitted_own = own

    def predict(self, context, candidates) -> np.ndarray:
        return self.inner.predict(context, candidates)


def pretrained_cost_model(path: str | Path | None = None) -> KeepsTraining:
    """MetaSchedule's XGBModel (on :class:`~ms_heron.search.features.FiniteFeatures`) holding the
    records and the booster of ``path`` (the shipped file when None): it predicts from the first
    round, and trains on as the run measures (:class:`KeepsTraining`).

    Raises
    ------
    PretrainedModelMissing
        When ``path`` does not exist.
    """
    path = Path(path) if path is not None else shipped_path()
    if not path.is_file():
        raise PretrainedModelMissing(
            f"no pretrained cost model at {path}: rebuild it with bench/train_cost_model.py, or "
            "tune with the cost model untrained (without --pretrained-model)"
        )
    import xgboost as xgb  # pylint: disable=import-outside-toplevel

    model = xgb_cost_model()
    with np.load(path, allow_pickle=False) as stored:
        features = np.split(stored["features"].astype(np.float32), np.cumsum(stored["rows"])[:-1])
        groups, costs = stored["groups"], stored["costs"].astype(np.float32)
        for index, key in enumerate(stored["group_keys"]):
            members = np.flatnonzero(groups == index)
            model.data[f"{GROUP_PREFIX}{key}"] = FeatureGroup(
                group_hash=f"{GROUP_PREFIX}{key}",
                features=[features[i] for i in members],
                costs=costs[members],
            )
        model.data_size = len(costs)
        booster = xgb.Booster()
        booster.load_model(bytearray(stored["booster"].tobytes()))
    model.booster = booster
    return KeepsTraining(model, model.data_size)


def pretrained_info(path: str | Path | None = None) -> PretrainedInfo:
    """The shipped (or ``path``'s) model's training summary."""
    path = Path(path) if path is not None else shipped_path()
    with np.load(path, allow_pickle=False) as stored:
        info = json.loads(str(stored["info"]))
    return PretrainedInfo(**{**info, "cpus": tuple(info["cpus"])})


def record_candidates(mod, records) -> list[ms.MeasureCandidate]:
    """``records`` of the task ``mod`` replayed as MetaSchedule's measure candidates: what a cost
    model rates, from what a database holds."""
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    out = []
    for record in records:
        sch = Schedule(mod, debug_mask="none")
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        out.append(ms.MeasureCandidate(sch, args))
    return out


def save_pretrained(model: ms.cost_model.XGBModel, path: str | Path, info: PretrainedInfo) -> None:
    """Write ``model``'s records and booster in the form :func:`pretrained_cost_model` reads."""
    groups = list(model.data.values())
    features = [f for g in groups for f in g.features]
    raw = io.BytesIO()
    np.savez_compressed(
        raw,
        features=np.concatenate(features).astype(np.float16),
        rows=np.array([len(f) for f in features], dtype=np.int32),
        groups=np.concatenate(
            [np.full(len(g.costs), i, dtype=np.int32) for i, g in enumerate(groups)]
        ),
        costs=np.concatenate([g.costs for g in groups]).astype(np.float32),
        group_keys=np.array([g.group_hash.removeprefix(GROUP_PREFIX) for g in groups]),
        booster=np.frombuffer(bytes(model.booster.save_raw("ubj")), dtype=np.uint8),
        info=np.array(json.dumps({**info.__dict__, "cpus": list(info.cpus)})),
    )
    Path(path).write_bytes(raw.getvalue())
