"""HeronSearch: the constrained genetic search inside MetaSchedule's tuning loop."""

import pytest
import tvm_ffi
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult

from conftest import SMALL_SHAPES
from ms_heron import HeronSearch, HeronSpace, workloads
from ms_heron.evaluate import build, run_and_check
from ms_heron.tune import best_schedule, tune_workload


@pytest.mark.parametrize("family,dtype", [("gemm", "int8"), ("c2d", "fp32"), ("scan", "int8")])
def test_tunes_and_best_record_is_correct(family, dtype, cpu_target, tmp_path):
    workload = workloads.make(family, dtype, **SMALL_SHAPES[family])
    db = tune_workload(
        workload, cpu_target, str(tmp_path), 8, num_trials_per_iter=4, space=HeronSpace(), strategy=HeronSearch(), seed=0
    )
    assert len(db.get_all_tuning_records()) == 8
    run_and_check(build(best_schedule(db, workload, cpu_target).mod, cpu_target), workload)


def _strategy(workload, target, seed):
    ctx = ms.TuneContext(
        mod=workload.func,
        target=target,
        space_generator=HeronSpace(),
        search_strategy=HeronSearch(),
        task_name="t",
        rand_state=seed,
    ).clone()
    spaces = ctx.generate_design_space()
    ctx.search_strategy.pre_tuning(16, 8, spaces, None, None)
    return ctx.search_strategy


def _hashes(candidates):
    return [tvm_ffi.structural_hash(c.sch.mod) for c in candidates]


def test_deterministic_with_fixed_seed(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    first = _hashes(_strategy(workload, cpu_target, 7).generate_measure_candidates())
    again = _hashes(_strategy(workload, cpu_target, 7).generate_measure_candidates())
    other = _hashes(_strategy(workload, cpu_target, 8).generate_measure_candidates())
    assert first == again and len(set(first)) == len(first) == 8
    assert first != other


def test_survives_failed_candidates_and_stops_at_budget(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    strategy = _strategy(workload, cpu_target, 1)
    for _ in range(2):
        batch = strategy.generate_measure_candidates()
        assert batch and len(batch) == 8
        failed = [RunnerResult(run_secs=None, error_msg="build failed: simulated by the test") for _ in batch]
        strategy.notify_runner_results(batch, failed)
    assert strategy.generate_measure_candidates() is None  # 16 trials spent, all failed: tuning ends cleanly
