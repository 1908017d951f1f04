"""Relax rewrite (fast math): ``QuantizeLinear`` by a constant scale as a multiplication by its
reciprocal.

Legalized, ``quantize`` divides every element by its scale, a one-element argument of the kernel
(:func:`.quantization_parameters_as_tensors`), so LLVM may not turn the division into a
multiplication: every int8 convolution's epilogue issues a ``vdivps`` per vector of outputs, and a
ResNet's residual epilogue two. The divider is slow next to the dot products (its throughput is a
few cycles per vector): a 1x1 convolution of 64 input channels has only 64 products per output, and
ResNet-50's such convolutions ran at 50-70% of their AVX2 bound with it.

Written out as ``round(x * (1 / scale)) + zero_point``, clipped and cast, the epilogue multiplies.
The result can differ from the division's where ``x / scale`` lies within a rounding error of a
half step: by one quantization step, rarely -- as ONNX Runtime's fused QLinearConv, which
requantizes by a multiplier too. :func:`~ms_heron.relax.lower_for_tuning` runs it unless
``exact_math``.
"""

from __future__ import annotations

import numpy as np
from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from .guard import never_failing
from .sinking import constant_value, static_shape


def _along(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """Per-channel ``values`` shaped to broadcast along ``axis`` of a rank-``rank`` tensor (one
    value as it is)."""
    if values.size == 1:
        return values.reshape([1] * min(values.ndim, rank))
    shape = [1] * rank
    shape[axis % rank] = values.size
    return values.reshape(shape)


def _by_reciprocal(expr: relax.Call, _matches) -> relax.Expr:
    data, scale, zero_point = expr.args
    scales, zeros = constant_value(scale), constant_value(zero_point)
    shape, out_dtype = static_shape(data), str(expr.attrs.out_dtype)
    if (
        shape is None
        or str(data.ty.dtype) != "float32"
        or out_dtype not in ("uint8", "int8")
        or scales is None
        or zeros is None
        or not np.all(scales)
    ):
        return expr
    axis, rank, limits = int(expr.attrs.axis), len(shape), np.iinfo(out_dtype)
    reciprocal = _along((1.0 / scales.astype(np.float64)).astype(np.float32), axis, rank)
    offset = _along(zeros.astype(np.float32), axis, rank)
    scaled = relax.op.round(relax.op.multiply(data, relax.const(reciprocal)))
    clipped = relax.op.clip(
        relax.op.add(scaled, relax.const(offset)), float(limits.min), float(limits.max)
    )
    return relax.op.astype(clipped, out_dtype)


@never_failing
@relax.transform.function_pass(opt_level=0, name="QuantizeByReciprocal")
def quantize_by_reciprocal(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite every float32 -> u8/s8 ``quantize`` whose scale and zero point are constants as a
    multiplication by the scale's reciprocal, rounded, offset, clipped and cast."""
    pattern = is_op("relax.quantize")(wildcard(), is_const(), is_const())
    return rewrite_call(pattern, _by_reciprocal, func)
