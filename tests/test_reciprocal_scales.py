"""Fast math for quantization: a quantize by constant scales multiplies by their reciprocals, within
one quantization step of the division it replaces; exact math, and a scale computed at run time,
keep the division."""

import warnings

import numpy as np
import pytest
from tvm import relax
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ms_heron.relax import compile_model, lower_for_tuning, run_model

SHAPE = (1, 4, 8, 8)


def _quantize(out_dtype: str, scale: relax.Expr | None = None):
    """``quantize(x, scale, zero point)`` along the channels (axis 1), with a constant scale per
    channel unless ``scale`` (an expression of ``x``) is given."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    zero = np.array([3, 0, 7, 1], out_dtype)
    with builder.function("main", [x]):
        with builder.dataflow():
            if scale is None:
                scale = relax.const(np.array([0.02, 0.5, 1 / 3, 0.1], np.float32))
            else:
                scale = builder.emit(scale(x))
            y = builder.emit_output(
                relax.op.quantize(x, scale, relax.const(zero), axis=1, out_dtype=out_dtype)
            )
        builder.emit_func_output(y)
    return builder.get()


def _divides(lowered) -> bool:
    return any(" / " in f.script() for gv, f in lowered.functions_items() if gv.name_hint != "main")


@pytest.mark.parametrize("out_dtype", ["uint8", "int8"])
def test_a_constant_scale_quantizes_by_its_reciprocal_within_one_step(cpu_target, out_dtype):
    """Per channel, u8 and s8, clipped at both ends: the kernel multiplies; its result equals the
    division's but where ``x / scale`` lies within a rounding error of a half step, by one step;
    with exact math the kernel divides and equals numpy's ``round(x / scale) + zero point``."""
    mod = _quantize(out_dtype)
    x = np.random.default_rng(0).normal(0, 40, SHAPE).astype(np.float32)
    scale = np.array([0.02, 0.5, 1 / 3, 0.1], np.float32).reshape(1, 4, 1, 1)
    zero = np.array([3, 0, 7, 1]).reshape(1, 4, 1, 1)
    limits = np.iinfo(out_dtype)
    exact = np.clip(np.round(x / scale) + zero, limits.min, limits.max)
    for exact_math in (False, True):
        assert (
            _divides(lower_for_tuning(mod, None, cpu_target, exact_math=exact_math)) == exact_math
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # untuned kernels
            executable = compile_model(
                ms.database.MemoryDatabase(), mod, None, cpu_target, exact_math=exact_math
            )
        (got,) = run_model(executable, {"x": x})
        assert got.dtype == np.dtype(out_dtype)
        off = np.abs(got.astype(np.int64) - exact)
        if exact_math:
            assert not off.any()
        else:
            assert off.max() <= 1 and off.mean() < 0.01
            assert {limits.min, limits.max} <= set(got.ravel().tolist())  # both clips reached


def test_a_scale_computed_at_run_time_keeps_its_division():
    """``DynamicQuantizeLinear``'s scale is known only when the model runs: left as it is."""
    target = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    mod = _quantize("uint8", scale=lambda x: relax.op.max(relax.op.abs(x), axis=[0, 2, 3]))
    assert _divides(lower_for_tuning(mod, None, target))
