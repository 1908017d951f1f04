"""int8 3x3 convolutions as exact integer Winograd F(2x2, 3x3) where the CPU's exact dot product
multiplies s16 (AVX2, AVX-512BW without VNNI): bit for bit against numpy on adversarial inputs,
tuned onto the s16 dot product, and left direct where a sum could leave s32 or bytes are faster.

Kernels compiled for ``haswell`` run on every host here; a skip names the CPU."""

import re
import warnings

import numpy as np
import pytest
from tvm import relax
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from ms_heron.hardware.dot_products import S16_DOT_PRODUCTS, dot_product
from ms_heron.hardware.targets import ISA_MCPU, cpu_name, host_target
from ms_heron.relax import compile_model, extract_tasks, lower_for_tuning, run_model
from ms_heron.relax.passes.quantized import integer_conv2d
from ms_heron.relax.passes.winograd import F2_INTEGER, integer_sums_fit, winograd_weight
from ms_heron.tuning import tune_model

ZERO_POINT = 3


def _target(isa: str) -> Target:
    return Target({"kind": "llvm", "mcpu": ISA_MCPU[isa], "num-cores": 2})


def _convolution(weight: np.ndarray, height: int, width: int):
    """ONNX's ``ConvInteger`` (NCHW, OIHW s8 weight, padding 1, input zero point
    :data:`ZERO_POINT`) as ms_heron imports it: the input padded with its zero point, a
    channels-last u8 x s8 -> s32 convolution, the zero point's correction after it."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, weight.shape[1], height, width), "uint8"))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = integer_conv2d(
                x, relax.const(weight), ZERO_POINT, [1] * 4, strides=[1, 1], dilations=[1, 1]
            )
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    return builder.get()


def _exact(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The convolution in int64, numpy's."""
    _, _, height, width = x.shape
    padded = np.pad(x.astype(np.int64) - ZERO_POINT, [(0, 0), (0, 0), (1, 1), (1, 1)])
    out = np.zeros((1, weight.shape[0], height, width), np.int64)
    for dy in range(3):
        for dx in range(3):
            window = padded[:, :, dy : dy + height, dx : dx + width]
            out += np.einsum("nchw,kc->nkhw", window, weight[:, :, dy, dx].astype(np.int64))
    return out


def _adversarial(channels: int, outputs: int, height: int, width: int, seed: int):
    """u8 inputs of 255 and 0 against s8 weights of 127 and -128: every transformed input and
    weight at or near its extreme (+-1020, +-1152)."""
    rng = np.random.default_rng(seed)
    x = rng.choice(np.array([255, 0, 254], np.uint8), size=(1, channels, height, width))
    weight = rng.choice(np.array([-128, 127, 0, 1], np.int8), size=(outputs, channels, 3, 3))
    return x, weight


def _task_kinds(lowered, target) -> list[str]:
    return sorted(re.sub(r"\d+", "", t.task_name) for t in extract_tasks(lowered, target))


@pytest.mark.parametrize("isa", ["avx2", "avx512bw"])
def test_an_int8_convolution_runs_as_integer_winograd_bit_exact_on_adversarial_inputs(isa):
    """A 9x7 image (its last row and column of 2x2 tiles cropped) with 32 input and 48 output
    channels lowers to the input transform (its zero-point padding fused in), a batched GEMM of s16
    operands and the output transform (the zero point's correction fused in); untuned, it equals
    numpy's convolution on inputs and weights at their extremes."""
    target = _target(isa)
    x, weight = _adversarial(32, 48, 9, 7, seed=0)
    mod = _convolution(weight, 9, 7)
    lowered = lower_for_tuning(mod, None, target)
    assert _task_kinds(lowered, target) == [
        "fused_pad_transpose_winograd_input",
        "fused_winograd_output_subtract_transpose",
        "matmul",
    ]
    (gemm,) = [f for g, f in lowered.functions_items() if g.name_hint.startswith("matmul")]
    assert [str(p.ty.dtype) for p in gemm.params] == ["int16", "int16", "int32"]
    if not dot_product(target).runs_on(host_target()):
        pytest.skip(f"the host CPU ({cpu_name(host_target())}) cannot run {ISA_MCPU[isa]} code")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # untuned kernels
        executable = compile_model(ms.database.MemoryDatabase(), mod, None, target)
    (got,) = run_model(executable, {"x": x})
    np.testing.assert_array_equal(got, _exact(x, weight))


def test_integer_winograd_holds_only_weights_whose_sums_fit_s32():
    """Against u8 inputs, all-(-128) weights put 1152 x 1020 in each channel's product and nine of
    those sums in each output: 203 input channels fit s32, 204 do not. Such a convolution stays
    direct; weights of trained networks, far from all at the extreme, fit many more channels."""

    def fits(channels: int) -> bool:
        weight = np.full((3, 3, channels, 16), -128, np.int16)
        return integer_sums_fit(winograd_weight(weight, F2_INTEGER))

    assert fits(203) and not fits(204)
    target = _target("avx2")
    weight = np.full((16, 204, 3, 3), -128, np.int8)
    lowered = lower_for_tuning(_convolution(weight, 6, 6), None, target)
    assert not any("winograd" in kind for kind in _task_kinds(lowered, target))


def test_a_cpu_with_vnni_keeps_int8_convolutions_direct():
    """``vpdpbusd`` sums four byte products per lane: 2.25x fewer products in s16 pairs would not
    pay for the transforms."""
    target = Target({"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2})
    _, weight = _adversarial(32, 32, 8, 8, seed=1)
    lowered = lower_for_tuning(_convolution(weight, 8, 8), None, target)
    assert not any("winograd" in kind for kind in _task_kinds(lowered, target))


def test_tuned_the_integer_winograd_gemm_runs_on_the_s16_dot_product_and_stays_exact(tmp_path):
    """Tuned for AVX2 (16 trials), the GEMM's kernel is tensorized with ``vpmaddwd`` on s16
    values, and the convolution still equals numpy's on adversarial inputs."""
    target = _target("avx2")
    (s16,) = [d for d in S16_DOT_PRODUCTS if d.isa == "AVX2"]
    x, weight = _adversarial(32, 32, 10, 10, seed=2)
    mod = _convolution(weight, 10, 10)
    database = tune_model(mod, None, target, str(tmp_path), 16, num_trials_per_iter=4, seed=0)
    gemm_traces = [
        str(r.trace)
        for r in database.get_all_tuning_records()
        if [str(a.dtype) for a in ArgInfo.from_prim_func(r.workload.mod["main"])]
        == ["int16", "int16", "int32"]
    ]
    assert gemm_traces and all(s16.name in t for t in gemm_traces)
    (got,) = run_model(compile_model(database, mod, None, target), {"x": x})
    np.testing.assert_array_equal(got, _exact(x, weight))
