"""The library baselines the benchmarks compare with: correct results, and clear errors."""

import pytest

from ms_heron import workloads
from ms_heron.report.baselines import onnxruntime_operator_seconds


@pytest.mark.parametrize(
    "family, shape",
    [
        ("gemm", dict(M=32, N=48, K=64)),
        ("c2d", dict(N=1, H=9, W=9, CI=8, CO=16, KH=3, KW=3, stride=2, pad=1)),
    ],
)
def test_onnxruntime_fp32_operator_matches_the_workload_reference(family, shape):
    # the function checks ONNX Runtime's result against the workload's numpy reference itself
    assert 0 < onnxruntime_operator_seconds(workloads.make(family, "fp32", **shape), threads=2) < 1


def test_operators_without_a_baseline_are_named():
    with pytest.raises(
        ValueError, match="no ONNX Runtime baseline for t2d fp32; fp32 gemm and c2d have one"
    ):
        onnxruntime_operator_seconds(
            workloads.make("t2d", "fp32", N=1, H=4, W=4, CI=8, CO=16, KH=4, KW=4, stride=2, pad=1),
            2,
        )
