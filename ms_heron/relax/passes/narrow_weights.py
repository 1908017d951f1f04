"""Which constant s8 weights of each TIR function are narrow (within +-64), recorded on the function.

On a CPU without VNNI the exact dot product widens both operands to s16 (``vpmaddwd``, two products
per lane). Where every weight lies within +-64 -- the 7-bit weights of ONNX Runtime's
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

from ...hardware.dot_products import NARROW_WEIGHT
from ...schedule.annotations import NARROW_WEIGHTS
from .guard import never_failing

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


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
