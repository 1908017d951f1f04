"""The repaired VNNI intrinsic: tensorizes, emits vpdpbusd, and is bit-exact."""

import numpy as np
import pytest
from tvm.s_tir import Schedule, TensorIntrin

from ms_heron.evaluate import build, run_and_check
from ms_heron.intrinsics import TVM_VNNI_INTRIN, VNNI_INTRIN, ensure_registered
from ms_heron.testing import workloads


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
