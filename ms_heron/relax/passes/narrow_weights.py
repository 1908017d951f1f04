"""Constant s8 weights on a CPU without VNNI: narrow ones (within +-64) stay bytes, the others widen.

On a CPU without VNNI the exact dot product multiplies s16 (``vpmaddwd``, two products per lane):
:func:`s16_weights` stores such weights widened, once at compile time, so that no kernel widens
them per step. Where every weight lies within +-64 -- the 7-bit weights of ONNX Runtime's
``reduce_range`` quantization, which its guide suggests for such CPUs -- the bytes can be multiplied
as they are (``vpmaddubsw``, four per lane) without a pair of products overflowing s16. That is a
constraint on data, not on shapes: the values are known only here, where the weights are constants,
so this pass states it on the function (:data:`~ms_heron.schedule.annotations.NARROW_WEIGHTS`) and
the Tensorize rule offers the faster intrinsic only to functions whose weights satisfy it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard
from tvm.target import Target

from ...hardware.dot_products import NARROW_WEIGHT, dot_product
from ...schedule.annotations import NARROW_WEIGHTS
from .guard import never_failing
from .sinking import constant_value

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@never_failing
@relax.transform.function_pass(opt_level=0, name="S16Weights")
def s16_weights(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Store the constant s8 weight of every u8 x s8 -> s32 convolution and matmul as s16 where
    the current target's exact dot product multiplies s16 pairs (AVX2, AVX-512BW without VNNI),
    unless every weight is narrow (those multiply as bytes). Elsewhere it changes nothing."""
    target = Target.current(allow_none=True)
    dot = dot_product(target) if target is not None else None
    if dot is None or not dot.widens:
        return func
    pattern = is_op("relax.nn.conv2d")(wildcard(), is_const()) | is_op("relax.matmul")(wildcard(), is_const())

    def widen(expr, _matches):
        activation, weight = expr.args
        values = constant_value(weight)
        integer = (str(activation.ty.dtype), str(expr.ty.dtype), values.dtype) == ("uint8", "int32", np.int8)
        if not integer or _is_narrow(values):
            return expr
        return relax.Call(expr.op, [activation, relax.const(values.astype(np.int16))], expr.attrs)

    return rewrite_call(pattern, widen, func)


@never_failing
@tvm.transform.module_pass(opt_level=0, name="RecordNarrowWeights")
def record_narrow_weights(mod: IRModule, _ctx) -> IRModule:
    """Mark each TIR function's parameters that every call passes a narrow s8 constant."""
    narrow: dict[tvm.ir.GlobalVar, set[int]] = {}
    wide: dict[tvm.ir.GlobalVar, set[int]] = {}

    def visit(expr) -> None:
        if not (isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR)):
            return
        callee, args = expr.args[0], expr.args[1]
        for index, arg in enumerate(args.fields if isinstance(args, relax.Tuple) else [args]):
            fits = isinstance(arg, tvm.ir.expr.Constant) and _is_narrow(arg.value.numpy())
            (narrow if fits else wide).setdefault(callee, set()).add(index)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    for gvar, indices in narrow.items():
        indices = sorted(indices - wide.get(gvar, set()))
        if indices:
            mod[gvar] = mod[gvar].with_attr(NARROW_WEIGHTS, indices)
    return mod


def _is_narrow(values: np.ndarray) -> bool:
    return values.dtype == np.int8 and (values.size == 0 or int(np.abs(values.astype(np.int16)).max()) <= NARROW_WEIGHT)
