"""Relax rewrite: a reshape after a matmul moves past the element-wise ops that follow it.

``torch.nn.Linear`` on a ``[batch, sequence, features]`` tensor, and GPT-2's ``Conv1D``, export as
a flattening ``Reshape``, a 2-D ``MatMul`` and a ``Reshape`` back; the bias, the activation (GPT-2's
tanh GELU) and the residual add come after the second ``Reshape``. Relax's FuseOps fuses only
element-wise ops into a matmul's epilogue, so each of them ran as a kernel of its own, a pass over
the whole tensor (three per GPT-2 layer: its GELU and two residual adds). Moved past them as
:mod:`.sinking` moves a transpose, the reshape applies to the finished result, where it is a view;
two reshapes in a row become one, and one back to the shape the tensor has goes.
"""

from __future__ import annotations

import math

from tvm import IRModule, relax
from tvm.relax.dpl import DFPattern, is_op, wildcard

from .guard import never_failing
from .sinking import LayoutChange, constant_value, sink, static_shape


def _reapply_reshape(result: relax.Expr, reshape: relax.Call) -> relax.Expr | None:
    """``reshape`` applied to ``result``; None for a reshape that adds no axis: only un-flattening
    reshapes move, so the reshapes back that the moved ops' operands get never move in turn."""
    shape, inner = static_shape(reshape), static_shape(reshape.args[0])
    if shape is None or inner is None or len(shape) <= len(inner):
        return None
    return relax.op.reshape(result, shape)


def _unreshaped_operand(expr: relax.Expr, reshape: relax.Call) -> relax.Expr | None:
    """The other operand of an element-wise op on ``reshape(y)`` in ``y``'s shape: a scalar as it
    is, a tensor of the reshaped shape (a residual) reshaped back, a vector along a last axis the
    reshape kept (a bias) as a vector; None for any other broadcast."""
    shape, full, inner = static_shape(expr), static_shape(reshape), static_shape(reshape.args[0])
    if shape is None or full is None or inner is None:
        return None
    if math.prod(shape) == 1:
        return expr
    if shape == full:
        return _reshape(expr, inner)
    if full[-1] == inner[-1] and shape[-1] == full[-1] and math.prod(shape) == shape[-1]:
        return _reshape(expr, [shape[-1]])
    return None


def _reshape(expr: relax.Expr, shape: list[int]) -> relax.Expr:
    """``expr`` reshaped; a constant stays a constant, as the folds after this pass read it."""
    value = constant_value(expr)
    return relax.op.reshape(expr, shape) if value is None else relax.const(value.reshape(shape))


def _reshaped(inner: DFPattern) -> DFPattern:
    return is_op("relax.reshape")(inner, wildcard())


#: A reshape (a view).
_RESHAPE = LayoutChange(_reshaped, _reapply_reshape, _unreshaped_operand)


def _compose_rule() -> tuple:
    """``reshape(reshape(x, a), b)`` is ``reshape(x, b)``, or ``x`` when ``b`` is ``x``'s shape."""
    inner = wildcard()
    first = _reshaped(inner)

    def compose(expr, matches):
        shape, source = static_shape(expr), matches[inner]
        if shape is None:
            return expr
        return source if static_shape(source) == shape else relax.op.reshape(source, shape)

    return _reshaped(first), compose


@never_failing
@relax.transform.function_pass(opt_level=0, name="ViewsAfterEpilogues")
def views_after_epilogues(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Move reshapes past the element-wise ops that follow them, so that those fuse into the kernel
    before the reshape; merge reshapes in a row and drop those that change nothing."""
    return sink(func, _RESHAPE, [_compose_rule()])
