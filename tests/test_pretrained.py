"""The pretrained cost model shipped in the package: it loads, ranks the programs of tasks it never
saw better than chance, ranks a new task's first round, and hands over to the model the run trains
on its measurements."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from rule_helpers import started_search
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.target import Target

from ms_heron import workloads
from ms_heron.records import DATABASE_FILES, read_records
from ms_heron.search.decision_model import rank_correlation
from ms_heron.search.pretrained import (
    HANDOVER,
    PretrainedModelMissing,
    pretrained_cost_model,
    pretrained_info,
    record_candidates,
)

#: Records of tasks the shipped model was not fitted on (``bench/train_cost_model.py`` writes them).
HELD_OUT = Path(__file__).parent / "data" / "cost_model_held_out"
#: The least mean rank correlation (Spearman) of predicted with measured speed the shipped model
#: reaches on the held-out tasks; chance is 0.
LEAST_RANK_CORRELATION = 0.3


def _held_out_tasks() -> list[tuple[ms.TuneContext, list, list]]:
    """(context, candidates, records) of each held-out task, as measured (a Zen 4's target)."""
    first = (HELD_OUT / DATABASE_FILES[1]).read_text().splitlines()[0]
    target = Target(json.loads(first)[1][2])
    database = read_records(HELD_OUT, target).database
    by_task: dict[str, list] = {}
    for record in database.get_all_tuning_records():
        by_task.setdefault(record.workload.as_json()[0], []).append(record)
    return [
        (
            ms.TuneContext(mod=records[0].workload.mod, target=target),
            record_candidates(records[0].workload.mod, records),
            records,
        )
        for records in by_task.values()
    ]


@pytest.fixture(scope="module")
def held_out():
    return _held_out_tasks()


def test_the_shipped_model_ranks_held_out_tasks_better_than_chance(held_out):
    info = pretrained_info()
    assert info.programs > 1000 and info.tasks > 10 and info.cpus
    model = pretrained_cost_model()
    rhos = []
    for context, candidates, records in held_out:
        predicted = model.predict(context, candidates)
        speed = [1 / np.mean([float(s) for s in r.run_secs]) for r in records]
        rhos.append(rank_correlation(list(predicted), speed))
    assert len(held_out) >= 4 and not any(math.isnan(r) for r in rhos)
    assert np.mean(rhos) >= LEAST_RANK_CORRELATION, rhos


def test_the_runs_own_model_takes_over_a_task_as_it_is_measured(held_out):
    """The run's own model has no say while it guesses at random (MetaSchedule's warm-up), then
    ranks a measured task the more the more it is measured, and a task never measured stays the
    pretrained model's; the pretrained booster is never refitted."""
    model = pretrained_cost_model()
    (context, candidates, records), (other, other_candidates, _) = held_out[0], held_out[1]
    results = [RunnerResult(run_secs=r.run_secs, error_msg=None) for r in records]
    pretrained_booster, alone = model.pretrained.booster, model.predict(context, candidates)
    weights = []
    while model.own.data_size < model.own.num_warmup_samples:
        assert model.own_weight(context) == 0.0
        model.update(context, candidates, results)
    for _ in range(3):
        weights.append(model.own_weight(context))
        model.update(context, candidates, results)
    measured = model.own.data_size
    assert weights[0] == measured_weight(measured - 3 * len(candidates))
    assert 0.5 < weights[0] < weights[1] < weights[2] < 1
    assert model.own_weight(other) == 0.0
    assert not np.allclose(model.predict(context, candidates), alone)
    assert np.array_equal(
        model.predict(other, other_candidates), model.pretrained.predict(other, other_candidates)
    )
    assert model.pretrained.booster is pretrained_booster


def measured_weight(measured: int) -> float:
    return measured / (measured + HANDOVER)


def test_a_new_tasks_first_round_is_ranked_by_the_pretrained_model(cpu_target):
    """With the pretrained model, HeronSearch ranks round 0 by program features (no measurement
    of the task yet); with an untrained one it cannot."""
    workload = workloads.make("gemm", "fp32", M=64, N=64, K=64)
    for model, ranked in ((pretrained_cost_model(), True), (ms.cost_model.XGBModel(), False)):
        strategy = started_search(
            workload.func, cpu_target, trials=16, per_round=8, cost_model=model, rand_state=1
        )
        assert strategy.generate_measure_candidates()
        assert strategy.transferred is ranked


def test_a_missing_model_file_names_the_fix(tmp_path):
    with pytest.raises(PretrainedModelMissing) as caught:
        pretrained_cost_model(tmp_path / "nowhere.npz")
    assert str(caught.value) == (
        f"no pretrained cost model at {tmp_path / 'nowhere.npz'}: rebuild it with "
        "bench/train_cost_model.py, or tune with the cost model untrained (without "
        "--pretrained-model)"
    )
