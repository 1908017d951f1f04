"""A channel order (``take`` of constant indices along one axis) moved into the kernel that
produces the tensor, where it costs nothing.

:func:`~.narrow_weights.s16_weights` pairs an 8-bit weight's reduction anew and takes the
activation's channels in that order: a copy of the activation. Where the activation is the result
of a convolution or a matmul with a constant weight, through element-wise ops, transposes and pads
that nothing else reads, the order instead permutes that weight's output channels (and the
epilogue's per-channel constants), and the copy is gone. A tensor that something else reads too (a
residual stream) keeps its copy, where it was: reordering it in place would change what the others
read, and a copy further up (of float values before a quantize) would cost more.
"""

from __future__ import annotations

import numpy as np
from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, wildcard

from .guard import never_failing
from .sinking import (
    BINARY,
    UNARY,
    constant_value,
    rewrite_calls,
    scalar_operands,
    static_shape,
    values_used_once,
)


@never_failing
@relax.transform.function_pass(opt_level=0, name="ChannelOrdersIntoProducers")
def channel_orders_into_producers(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Apply every constant-index ``take`` to the weight of the convolution or matmul whose result
    reaches it only through ops nothing else reads; other takes stay."""
    bound, used_once = relax.analysis.get_var2val(func), values_used_once(func)
    inner, indices = wildcard(), is_const()
    take = is_op("relax.take")(inner, indices)

    def into_producer(expr, matches):
        order = _Order(constant_value(matches[indices]), bound, used_once)
        moved = order.applied(matches[inner], int(expr.attrs.axis), len(static_shape(expr)))
        return expr if moved is None else moved

    return rewrite_calls(take, into_producer, func)


class _Order:
    """One channel order, and how each op takes it to the kernel before it."""

    def __init__(self, order: np.ndarray, bound: dict, used_once: set):
        self.order, self.bound, self.used_once = order, bound, used_once

    def applied(self, value: relax.Expr, axis: int, rank: int) -> relax.Expr | None:
        """``value`` (an op's bound value, read only here) computed with ``axis`` in the order,
        the order applied to a constant weight; None: no such weight is reached."""
        if value not in self.used_once or not isinstance(value, relax.Call):
            return None
        name, args = value.op.name, list(value.args)
        if name in UNARY and scalar_operands(value):
            return self._through(value, 0, axis, rank)
        if name in BINARY:
            operands = [self._operand(a, axis, rank) for a in args]
            tensors = [i for i, o in enumerate(operands) if o is None]
            if len(tensors) != 1:  # the order reaches one producer, or two copies would stay
                return None
            return self._through(value, tensors[0], axis, rank, operands)
        if name == "relax.permute_dims":
            axes = value.attrs.axes
            source = rank - 1 - axis if axes is None else int(axes[axis])  # None: reversed
            return self._through(value, 0, source, rank)
        if name == "relax.nn.pad":
            widths = [int(w) for w in value.attrs.pad_width]
            return (
                self._through(value, 0, axis, rank)
                if widths[2 * axis : 2 * axis + 2] == [0, 0]
                else None
            )
        if writes_channels(value, axis):
            return with_weight_taken(value, self.order, weight_output_axis(value))
        return None

    def _through(self, value: relax.Call, index: int, axis: int, rank: int, args=None):
        """``value`` with its operand ``index`` (a variable) in the order along ``axis``."""
        args = list(args or value.args)
        source = value.args[index]
        if not isinstance(source, relax.Var) or source not in self.bound:
            return None
        shape = static_shape(source)
        if shape is None:
            return None
        moved = self.applied(self.bound[source], axis - (rank - len(shape)), len(shape))
        if moved is None:
            return None
        args[index] = moved
        return relax.Call(value.op, args, value.attrs)

    def _operand(self, expr: relax.Expr, axis: int, rank: int) -> relax.Expr | None:
        """A broadcast operand in the order: a constant permuted, an axis it broadcasts along as it
        is; None: a tensor, which only its producer can reorder."""
        shape = static_shape(expr)
        if shape is None:
            return None
        own = axis - (rank - len(shape))
        if own < 0 or shape[own] == 1:
            return expr
        value = constant_value(expr)
        return None if value is None else taken_constant(value, self.order, own)


def reads_channels(call: relax.Call) -> bool:
    """A convolution or matmul with a constant weight (a matrix at least): it reduces its input's
    channels."""
    weight = constant_value(call.args[1]) if len(call.args) > 1 else None
    if weight is None:
        return False
    if call.op.name == "relax.nn.conv2d":
        return int(call.attrs.groups) == 1
    return call.op.name == "relax.matmul" and weight.ndim >= 2


def multiplies_u8_by_s8(call: relax.Call) -> bool:
    """A u8 x s8 -> s32 product: the one whose s8 weight's adjacent pairs decide whether a dot
    product may multiply bytes."""
    dtypes = [str(a.ty.dtype) for a in call.args[:2]] + [str(call.ty.dtype)]
    return dtypes == ["uint8", "int8", "int32"]


def writes_channels(call: relax.Call, axis: int) -> bool:
    """``call`` computes its result's ``axis`` from a constant weight's output channels."""
    if not reads_channels(call):
        return False
    if call.op.name == "relax.matmul":
        return axis == len(static_shape(call)) - 1
    return (str(call.attrs.out_layout) or str(call.attrs.data_layout)).index("C") == axis


def weight_output_axis(call: relax.Call) -> int:
    """The weight's axis that a writer's output channels run along."""
    if call.op.name == "relax.matmul":
        return len(static_shape(call.args[1])) - 1
    return str(call.attrs.kernel_layout).index("O")


def with_weight_taken(call: relax.Call, order: np.ndarray, axis: int) -> relax.Call:
    """``call`` with its constant weight taken in ``order`` along ``axis``."""
    weight = taken_constant(constant_value(call.args[1]), order, axis)
    return relax.Call(call.op, [call.args[0], weight, *call.args[2:]], call.attrs)


def paired_channels(call: relax.Call) -> int | None:
    """The activation's axis that the weight's paired axis reduces against, so the one a copy in
    another order takes: a matmul's last, a channels-last convolution's channels (None: grouped,
    or another layout, whose pairing is not known)."""
    if call.op.name == "relax.matmul":
        return len(call.args[0].ty.shape) - 1
    data = str(call.attrs.data_layout)
    return data.index("C") if data.endswith("C") and int(call.attrs.groups) == 1 else None


def channel_copy(tensor: relax.Expr, order: np.ndarray, axis: int) -> relax.Call:
    """``tensor`` with ``axis`` in ``order``: a copy at run time, clamped as every gather the tuner
    runs must be (:mod:`.gathers`; its kernel gets the order as a parameter, which the tuner fills
    with random indices)."""
    return relax.op.take(tensor, relax.const(order.astype(np.int32)), axis=axis, mode="clip")


def taken_constant(value: np.ndarray, order: np.ndarray, axis: int) -> relax.Constant:
    """A constant's ``value`` with ``axis`` in ``order``, the kernel's epilogue or weight
    permuted once at compile time."""
    return relax.const(np.take(value, order, axis))
