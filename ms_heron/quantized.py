"""Relax rewrite that lets quantized (u8 x s8) matmuls reach the VNNI tensor intrinsic.

ONNX's ``MatMulInteger`` -- what ONNX Runtime's quantizer writes -- imports as
``matmul(astype(a_u8, i32) - zp, astype(w_s8, i32))``: an int32 x int32 product no int8
instruction can execute. The rewrite keeps the operands 8-bit and moves the zero point out of the
product, ``sum_k (a - zp) w = sum_k a w - zp * sum_k w``, so the matmul is u8 x s8 -> s32
(VNNI's ``vpdpbusd``) and the correction is a constant column sum folded at compile time.
"""

from __future__ import annotations

from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _u8_s8_matmul(activation, weight):
    return relax.op.matmul(activation, weight, out_dtype="int32")


def _patterns():
    """(pattern, rewriter) for ``matmul((a - zp), w)`` and ``matmul(a, w)`` over widened 8-bit inputs."""
    act, zero_point, weight = wildcard(), is_const(), is_const()
    widened_act = is_op("relax.astype")(act)
    widened_weight = is_op("relax.astype")(weight)
    with_zp = is_op("relax.matmul")(is_op("relax.subtract")(widened_act, is_op("relax.astype")(zero_point)), widened_weight)
    without_zp = is_op("relax.matmul")(widened_act, widened_weight)

    def applies(expr, matches) -> bool:
        return (
            _dtype(expr) == "int32"
            and _dtype(matches[act]) == "uint8"
            and _dtype(matches[weight]) == "int8"
            and len(matches[weight].ty.shape) == 2
        )

    def rewrite_with_zp(expr, matches):
        if not applies(expr, matches):
            return expr
        w = matches[weight]
        column_sums = relax.op.sum(relax.op.astype(w, "int32"), axis=[0], keepdims=True)
        correction = relax.op.multiply(relax.op.astype(matches[zero_point], "int32"), column_sums)
        return relax.op.subtract(_u8_s8_matmul(matches[act], w), correction)

    def rewrite_without_zp(expr, matches):
        return _u8_s8_matmul(matches[act], matches[weight]) if applies(expr, matches) else expr

    return [(with_zp, rewrite_with_zp), (without_zp, rewrite_without_zp)]


@relax.transform.function_pass(opt_level=0, name="KeepInt8Matmuls")
def keep_int8_matmuls(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite every widened u8 x s8 matmul with a constant 2-D weight into a u8 x s8 -> s32 one."""
    for pattern, rewriter in _patterns():
        func = rewrite_call(pattern, rewriter, func)
    return func
