"""The repaired VNNI intrinsic: tensorizes, emits vpdpbusd, and is bit-exact."""

import json
import subprocess
import sys

import numpy as np
import pytest
from tvm.s_tir import Schedule, TensorIntrin
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ms_heron import HeronSearch, HeronSpace, workloads
from ms_heron.hardware.targets import target_json
from ms_heron.intrinsics import TVM_VNNI_INTRIN, VNNI_INTRIN, ensure_registered
from ms_heron.workloads.evaluate import build, run_and_check


def _tensorized_dense(intrin, M=32, N=64, K=32):
    workload = workloads.gemm(M=M, N=N, K=K)
    sch = Schedule(workload.func)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    j_outer, j_lane = sch.split(j, [None, 16])
    k_outer, k_lane = sch.split(k, [None, 4])
    sch.reorder(i, j_outer, k_outer, j_lane, k_lane)
    sch.decompose_reduction(block, k_outer)
    sch.tensorize(j_lane, intrin)
    return workload, sch


@pytest.mark.parametrize("intrin", [VNNI_INTRIN, TVM_VNNI_INTRIN])
def test_vnni_dense_is_bit_exact_and_uses_vpdpbusd(intrin, vnni_target):
    ensure_registered()
    workload, sch = _tensorized_dense(intrin)
    lib = build(sch.mod, vnni_target)
    assert "vpdpbusd" in lib.mod.inspect_source("asm")
    for seed in range(3):
        run_and_check(lib, workload, seed=seed)


def test_tvm_name_resolves_to_fixed_implementation():
    ensure_registered()
    ours = TensorIntrin.get(VNNI_INTRIN)
    tvms = TensorIntrin.get(TVM_VNNI_INTRIN)
    assert "int8x64" in tvms.impl.script() and tvms.impl.script() == ours.impl.script()
    assert np.all([d in tvms.desc.script() for d in ("uint8", "int8", "int32")])


_REPLAY = """
import json
import sys
import tvm
import ms_heron
from tvm.s_tir import meta_schedule as ms
from ms_heron import workloads

target = tvm.target.Target(json.loads(sys.argv[2]))
database = ms.database.JSONDatabase(work_dir=sys.argv[1])
sch = ms.tir_integration.compile_tir(database, workloads.gemm(M=32, N=64, K=32).func, target)
print("vpdpbusd" in tvm.compile(sch.mod, target=target).mod.inspect_source("asm"))
"""


def test_an_int8_record_compiles_with_stock_compile_tir_in_a_process_that_only_imported_ms_heron(tmp_path):
    """A tensorized record replays with no set-up call. Compiled for a VNNI CPU, not run, so any x86
    host checks it."""
    target = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    strategy = HeronSearch()
    ctx = ms.TuneContext(
        mod=workloads.gemm(M=32, N=64, K=32).func,
        target=target,
        space_generator=HeronSpace(),
        search_strategy=strategy,
        task_name="gemm",
        rand_state=0,
    )
    strategy.pre_tuning(4, 4, ctx.generate_design_space(), None, None)
    candidate = next(c for c in strategy.generate_measure_candidates() if VNNI_INTRIN in str(c.sch.trace))
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    db.commit_tuning_record(
        ms.database.TuningRecord(candidate.sch.trace, db.commit_workload(ctx.mod), [1e-3], target, candidate.args_info)
    )
    replay = subprocess.run(
        [sys.executable, "-c", _REPLAY, str(tmp_path), json.dumps(target_json(target))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr[-2000:]
    assert replay.stdout.strip().splitlines()[-1] == "True"
