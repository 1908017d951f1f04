"""A cost model that starts trained: MetaSchedule's XGBoost on program features, fitted beforehand
on this project's tuning records and shipped in the package, so that a new process ranks its first
round instead of sampling it at random.

Its targets are MetaSchedule's own, each program's speed relative to its task's fastest (min cost /
cost), so what it learned does not depend on one machine's absolute speed. A run then trains its
own model as MetaSchedule's does, from nothing, on its measurements alone, and :class:`HandsOver`
ranks each task by the two, weighing the run's own the more the task has been measured: the
pretrained model knows program features in general, the run's own model this host and these tasks.
(Refitting the shipped records together with the run's own, refit as they doubled, ranked
MobileNetV2's tasks worse at 2 minutes than the untrained model: the pretrained records outweighed
the run's.) ``bench/train_cost_model.py`` rebuilds the file from record directories as they
accumulate.

Tuning takes it with ``pretrained_model=True`` (``--pretrained-model``).
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
from tvm.s_tir.meta_schedule.utils import shash2hex

from .features import xgb_cost_model

#: The shipped model, in the package's data.
SHIPPED = "cost_model.npz"
#: A task's own measured programs at which the run's model weighs as much as the pretrained one in
#: ranking it: the run's weighs ``n / (n + HANDOVER)`` after ``n``.
HANDOVER = 32


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
class HandsOver(PyCostModel):
    """Ranks a task's candidates by ``pretrained`` (fixed) and ``own`` (trained on the run's
    measurements, as MetaSchedule's model is), the run's own weighing ``n / (n + HANDOVER)`` after
    ``n`` measured programs of the task, and nothing while it still guesses at random (before
    MetaSchedule's ``num_warmup_samples``)."""

    def __init__(self, pretrained: ms.cost_model.XGBModel, own: ms.cost_model.XGBModel):
        super().__init__()
        self.pretrained, self.own = pretrained, own

    def load(self, path: str) -> None:
        self.own.load(path)

    def save(self, path: str) -> None:
        self.own.save(path)

    def update(self, context, candidates, results) -> None:
        self.own.update(context, candidates, results)

    def own_weight(self, context) -> float:
        """The run's own model's weight in ranking ``context``'s task."""
        own = self.own
        if own.booster is None or own.data_size < own.num_warmup_samples:
            return 0.0
        group = own.data.get(shash2hex(context.mod))
        measured = 0 if group is None else len(group.costs)
        return measured / (measured + HANDOVER)

    def predict(self, context, candidates) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        # the features once, for both boosters (extraction costs more than a prediction)
        xs = [
            x.numpy().astype("float32")
            for x in self.own.extractor.extract_from(context, candidates)
        ]
        # pylint: disable=protected-access
        scores = self.pretrained._predict(xs=xs)  # XGBModel.predict, given the features
        weight = self.own_weight(context)
        if weight > 0:
            scores = weight * self.own._predict(xs=xs) + (1 - weight) * scores
        return scores.astype("float64")


def pretrained_cost_model(path: str | Path | None = None) -> HandsOver:
    """The booster of ``path`` (the shipped file when None) on
    :class:`~ms_heron.search.features.FiniteFeatures`, handing over to a model the run trains
    (:class:`HandsOver`): it predicts from the first round, and the run's measurements take over.

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

    pretrained = xgb_cost_model(num_warmup_samples=0)
    with np.load(path, allow_pickle=False) as stored:
        pretrained.booster = xgb.Booster()
        pretrained.booster.load_model(bytearray(stored["booster"].tobytes()))
    return HandsOver(pretrained, xgb_cost_model())


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
    """Write ``model``'s booster, and what it learned from, as :func:`pretrained_cost_model` and
    :func:`pretrained_info` read them."""
    raw = io.BytesIO()
    np.savez_compressed(
        raw,
        booster=np.frombuffer(bytes(model.booster.save_raw("ubj")), dtype=np.uint8),
        info=np.array(json.dumps({**info.__dict__, "cpus": list(info.cpus)})),
    )
    Path(path).write_bytes(raw.getvalue())
