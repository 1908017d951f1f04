"""Relax rewrite: an element-wise reduction over a stack of tensors as a chain of binary ops.

TVM's ONNX importer turns the n-ary ``Sum(a, b)`` (``Mean``, ``Max``, ``Min`` alike) into
``sum(stack((broadcast_to(a), broadcast_to(b))), axis=0)``: a copy of every input into a new
tensor, then a reduction over it, a kernel of its own that nothing fuses into (a ResNet's 16
residual adds, and the ReLU after each). ``a + b`` computes the same; Relax's FuseOps puts it, and
the activation after it, into the kernel that produces ``a`` -- what ONNX Runtime's graph optimizer
runs as one Conv + Add + ReLU.
"""

from __future__ import annotations

import functools

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, wildcard

from .guard import never_failing
from .sinking import rewrite_calls, static_shape

#: The reduction over the stacked axis -> the binary op that chains it.
_CHAINED = {
    "relax.sum": relax.op.add,
    "relax.mean": relax.op.add,
    "relax.max": relax.op.maximum,
    "relax.min": relax.op.minimum,
}


def _chain(expr, matches, stacked, reduce_op: str):
    stack = matches[stacked]
    tensors = stack.args[0]
    axis, reduce_axes = int(stack.attrs.axis), expr.attrs.axis
    if (
        not isinstance(tensors, relax.Tuple)
        or reduce_axes is None
        or [int(a) for a in reduce_axes] != [axis]
        or bool(expr.attrs.keepdims)
    ):
        return expr
    shape = static_shape(expr)
    operands = list(tensors.fields)
    if shape is None or shape not in [static_shape(o) for o in operands]:
        return expr  # every input was broadcast up: the chain would have a smaller shape
    result = functools.reduce(_CHAINED[reduce_op], operands)
    if reduce_op == "relax.mean":
        result = relax.op.divide(result, relax.const(float(len(operands)), str(expr.ty.dtype)))
    return result


@never_failing
@relax.transform.function_pass(opt_level=0, name="ChainStackedReductions")
def chain_stacked_reductions(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite ``sum/mean/max/min(stack(tensors), axis=k)`` into chained ``add/maximum/minimum``."""
    tensor = wildcard()
    # the importer adds one per input, shape unchanged
    identity = is_op("relax.broadcast_to")(tensor, wildcard())
    func = rewrite_calls(
        identity, lambda e, m: m[tensor] if static_shape(m[tensor]) == static_shape(e) else e, func
    )
    for reduce_op in _CHAINED:
        stacked = is_op("relax.stack")(wildcard())
        pattern = is_op(reduce_op)(stacked)
        func = rewrite_calls(
            pattern, lambda e, m, s=stacked, op=reduce_op: _chain(e, m, s, op), func
        )
    return func
