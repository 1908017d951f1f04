"""Every workload family, untuned, builds for this CPU and matches its numpy reference."""

import numpy as np
import pytest
from conftest import SMALL_SHAPES

from ms_heron import workloads
from ms_heron.workloads import WorkloadError
from ms_heron.workloads.evaluate import WrongResult, build, check_output, run_and_check


@pytest.mark.parametrize("dtype", ["int8", "fp32", "fp16"])
@pytest.mark.parametrize("family", sorted(SMALL_SHAPES))
def test_untuned_matches_reference(family, dtype, cpu_target):
    workload = workloads.make(family, dtype, **SMALL_SHAPES[family])
    run_and_check(build(workload.func, cpu_target), workload, seed=3)


def test_int8_check_is_bit_exact():
    workload = workloads.make("gemm", "int8", **SMALL_SHAPES["gemm"])
    inputs = workload.random_inputs()
    expected = workload.reference(inputs)
    off_by_one = expected.copy()
    off_by_one[0, 0] += 1
    with pytest.raises(WrongResult, match="1 of"):
        check_output(workload, off_by_one, expected)


def test_int8_inputs_use_full_range():
    """Saturating instructions (pmaddubsw) only show their errors on full-range inputs."""
    act, weight = workloads.gemm(M=64, N=64, K=64).random_inputs()
    assert act.dtype == np.uint8 and act.max() > 250 and act.min() < 5
    assert weight.dtype == np.int8 and weight.min() < -120 and weight.max() > 120


def test_pack_int8_layout():
    """Packed element [o//16, i//4, o%16, i%4] is logical element [o, i]."""
    w = np.arange(32 * 8).reshape(32, 8)
    packed = workloads.pack_int8(w)
    assert packed.shape == (2, 2, 16, 4)
    for o, i in [(0, 0), (17, 5), (31, 7), (5, 3)]:
        assert packed[o // 16, i // 4, o % 16, i % 4] == w[o, i]


def test_transposed_conv_output_size():
    w = workloads.t2d(N=1, H=7, W=7, CI=16, CO=16, KH=4, KW=4, stride=2, pad=1)
    assert w.output_shape == (1, 14, 14, 16)


def test_named_cases_cover_every_family():
    families = {family for family, _ in workloads.CASES.values()}
    assert families == set(workloads.FAMILIES)
    g1 = workloads.case("gemm.G1", "int8")
    assert g1.shape == dict(M=1024, N=1024, K=1024)
    assert g1.ops == 2 * 1024**3


@pytest.mark.parametrize("name", sorted(workloads.CASES))
def test_every_named_case_is_a_valid_workload(name):
    family = workloads.CASES[name][0]
    assert workloads.case(name, "fp32" if family in workloads.FP32_ONLY else "int8").ops > 0


def test_memory_bound_families_refuse_int8_and_name_the_fix():
    with pytest.raises(WorkloadError, match="softmax is a floating-point kernel: use dtype 'fp32'"):
        workloads.make("softmax", "int8", M=4, N=16)
