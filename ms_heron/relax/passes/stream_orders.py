"""One channel order for a tensor that int8 convolutions and matmuls read: a residual stream.

:func:`~.narrow_weights.s16_weights` pairs each 8-bit weight's reduction anew
(:func:`~ms_heron.hardware.dot_products.narrowing_order`) and takes the activation's channels in
that order, and :func:`~.channel_orders.channel_orders_into_producers` moves that copy into the
kernel before it -- where nothing else reads the activation. A ResNet's residual stream is read by
every block's first convolution and by the add at the block's end, each convolution wanting its
own order, so each kept its copy (1.6 ms of ResNet-50's 25 compiled for AVX2).

Here one order serves them all: it pairs the rows of all the readers' weights at once (their
columns side by side), and the whole stream -- the tensors joined through element-wise ops, adds,
transposes, (de)quantizes, channel-keeping pads, reshapes, poolings and reductions -- is computed
in it; a max or min over the channels, the range a dynamic quantization takes, reads it in any
order. The kernels that write it permute their weights' output channels, per-channel constants on
the way are permuted alike, and the readers' weights are stored with their rows in that order: no
copy remains, and each reader's weight then multiplies as bytes as it stands. A stream that
reaches anything else (the function's result, a parameter, an op that mixes channels, such as
a LayerNorm before BERT's attention), or whose readers admit no common order, is not reordered:
there the tensor's own readers share one copy in an order that fits them all (BERT's query, key and
value matmuls read one quantized activation), where each took its own.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import IRModule, relax
from tvm.target import Target

from ...hardware.dot_products import bytes_multiply_exactly, dot_product, narrowing_order
from .channel_orders import (
    channel_copy,
    multiplies_u8_by_s8,
    paired_channels,
    reads_channels,
    taken_constant,
    weight_output_axis,
    with_weight_taken,
    writes_channels,
)
from .guard import never_failing
from .sinking import BINARY, POOLS, REDUCTIONS, UNARY, constant_value, static_shape

_QUANTIZE = ("relax.quantize", "relax.dequantize")


@never_failing
@relax.transform.function_pass(opt_level=0, name="SharedChannelOrders")
def shared_channel_orders(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Compute each tensor that u8 x s8 convolutions and matmuls read in one channel order under
    which all their weights multiply as bytes exactly, or else give its readers one copy in such an
    order, where the target's exact dot product widens to s16 (AVX2, AVX-512BW without VNNI);
    elsewhere, or where no order needs to change, nothing."""
    target = Target.current(allow_none=True)
    dot = dot_product(target) if target is not None else None
    if dot is None or not dot.widens:
        return func
    graph = _Graph(func)
    values: dict[relax.Var, relax.Call] = {}
    # walked (a stream is walked once, from the first of its tensors a reader reads); settled
    # (computed in a common order, or given a copy its readers share)
    walked: set[relax.Var] = set()
    settled: set[relax.Var] = set()
    for value in list(graph.bound.values()):
        if not _integer_reader(value):
            continue
        start, axis = value.args[0], _channels(value)
        if start not in walked:
            stream = graph.stream(start, axis)
            walked.update(stream.axes if stream is not None else [start])
            order = None if stream is None else stream.common_order()
            if order is not None:
                values.update(stream.permuted(order, values))
                settled.update(stream.axes)
        if start in settled:
            continue
        settled.add(start)
        copy = graph.copied(start, axis)
        order = copy.common_order()
        if order is not None:
            values.update(copy.permuted(order, values))
    return _rebound(func, values) if values else func


class _Graph:
    """The function's op bindings, and which bindings read each variable."""

    def __init__(self, func: relax.Function):
        self.bound, self.users = {}, {}
        # read by the result or by a binding that is not an op's call: their order stays
        self.fixed = set(relax.analysis.free_vars(func.body.body))
        for var, value in _bindings(func):
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                self.bound[var] = value
                for arg in {a for a in value.args if isinstance(a, relax.Var)}:
                    self.users.setdefault(arg, []).append(var)
            else:
                self.fixed.update(relax.analysis.free_vars(value))

    def stream(self, start: relax.Var, axis: int) -> _Stream | None:
        """Every tensor joined to ``start`` through channel-keeping ops, with its channel axis, or
        None where the stream reaches what an order cannot pass."""
        stream = _Stream(self.bound)
        todo = [(start, axis)]
        while todo:
            var, axis = todo.pop()
            if var in stream.axes:
                if stream.axes[var] != axis:
                    return None
                continue
            if var in self.fixed or var not in self.bound:
                return None  # read by the result, or a parameter: its order stays
            stream.axes[var] = axis
            value = self.bound[var]
            carried = _operand_axes(value, axis)
            if carried is not None:
                for arg, at in zip(value.args, carried):
                    if isinstance(arg, relax.Var) and at is not None:
                        todo.append((arg, at))
                    elif at is not None and constant_value(arg) is None:
                        return None
            elif writes_channels(value, axis):
                stream.writers[var] = None
            else:
                return None
            for user in self.users.get(var, []):
                call = self.bound[user]
                if reads_channels(call) and call.args[0].same_as(var):
                    if _channels(call) != axis or call.args[1].same_as(var):
                        return None
                    stream.readers[user] = None
                    continue
                if _extreme_over(call, axis):
                    continue  # the same in any order
                out = _output_axis(call, var, axis)
                if out is None:
                    return None
                todo.append((user, out))
        return stream

    def copied(self, start: relax.Var, axis: int) -> _Stream:
        """``start``'s integer readers along ``axis``, to read one copy of it."""
        stream = _Stream(self.bound, copied=(start, axis))
        for user in self.users.get(start, []):
            call = self.bound[user]
            if (
                _integer_reader(call)
                and call.args[0].same_as(start)
                and paired_channels(call) == axis
            ):
                stream.readers[user] = None
        return stream


class _Stream:
    """Tensors that can be computed in one channel order: each one's channel axis, the bindings
    that write it (with a constant weight's output channels) and the bindings that read it (as a
    constant weight's reduction). Or, where ``copied`` names a tensor and its channel axis, only
    readers, which read one copy of it in the order."""

    def __init__(self, bound: dict, copied: tuple[relax.Var, int] | None = None):
        self.bound, self.copied = bound, copied
        self.axes: dict[relax.Var, int] = {}
        # in the function's order (insertion-ordered), so that the common order is the same in
        # every process that lowers the model
        self.writers: dict[relax.Var, None] = {}
        self.readers: dict[relax.Var, None] = {}

    def common_order(self) -> np.ndarray | None:
        """An order of the channels under which every integer reader's weight that can multiply
        as bytes does so; None: none needs another order, or no order serves them all."""
        rows, needed = [], False
        for var in self.readers:
            call = self.bound[var]
            if not _integer_reader(call):
                continue
            weight, axis = constant_value(call.args[1]), _weight_reduction(call)
            if not bytes_multiply_exactly(weight, axis):
                if narrowing_order(weight, axis) is None:
                    continue  # widened to s16 whatever the order
                needed = True
            rows.append(np.moveaxis(weight, axis, 0).reshape(weight.shape[axis], -1))
        return narrowing_order(np.concatenate(rows, axis=1), 0) if needed else None

    def permuted(self, order: np.ndarray, values: dict) -> dict[relax.Var, relax.Call]:
        """The new value of every binding the order changes, over ``values`` (those other
        streams' orders changed: a convolution may read one stream and write another)."""
        changed, source = {}, None
        if self.copied is not None:
            start, axis = self.copied
            first = next(iter(self.readers))
            # a variable of the dataflow block its readers are in, if they are in one
            dataflow = any(isinstance(v, relax.DataflowVar) for v in (start, first))
            source = (relax.DataflowVar if dataflow else relax.Var)(
                f"{start.name}_ordered", start.ty
            )
            changed[source] = channel_copy(start, order, axis)
        for var, axis in self.axes.items():
            value = values.get(var, self.bound[var])
            if var in self.writers:
                changed[var] = with_weight_taken(value, order, weight_output_axis(value))
            else:
                args = [_taken(a, order, x) for a, x in zip(value.args, _operand_axes(value, axis))]
                changed[var] = relax.Call(value.op, args, value.attrs)
        for var in self.readers:
            value = changed.get(var, values.get(var, self.bound[var]))
            if source is not None:
                value = relax.Call(value.op, [source, *value.args[1:]], value.attrs)
            changed[var] = with_weight_taken(value, order, _weight_reduction(value))
        return changed


def _operand_axes(call: relax.Call, axis: int) -> list[int | None] | None:
    """For an op that keeps channels apart, with its result's channels along ``axis``: the axis
    of each operand that holds them (None: a scalar, a broadcast or an attribute); None: the op
    mixes channels, or is not one this pass knows."""
    name, args = call.op.name, call.args
    shape = static_shape(call)
    if shape is None:
        return None
    if name in _QUANTIZE:
        own = int(call.attrs.axis) % len(shape)
        extents = [static_shape(a) for a in args[1:]]
        if any(e is None or (math.prod(e) > 1 and (own != axis or len(e) != 1)) for e in extents):
            return None
        return [axis, *(0 if math.prod(e) > 1 else None for e in extents)]
    if name in UNARY or name in BINARY:
        axes = []
        for arg in args:
            own = static_shape(arg)
            at = None if own is None else axis - (len(shape) - len(own))
            if at is not None and at >= 0 and own[at] != 1:
                if own[at] != shape[axis]:
                    return None
                axes.append(at)
            else:
                axes.append(None)
        return axes
    if name == "relax.permute_dims":
        order = call.attrs.axes
        return [len(shape) - 1 - axis if order is None else int(order[axis])]
    if name == "relax.nn.pad":
        widths = [int(w) for w in call.attrs.pad_width]
        return [axis] if widths[2 * axis : 2 * axis + 2] == [0, 0] else None
    if name in POOLS:
        return [axis] if str(call.attrs.layout).index("C") == axis else None
    if name in REDUCTIONS:
        rank = len(static_shape(args[0]))
        if call.attrs.axis is None:  # all of them
            return None
        reduced = sorted(int(a) % rank for a in call.attrs.axis)
        kept = (
            list(range(rank))
            if call.attrs.keepdims
            else [a for a in range(rank) if a not in reduced]
        )
        source = kept[axis]
        return [source] if source not in reduced else None
    if name in ("relax.reshape", "relax.broadcast_to"):
        before = static_shape(args[0])
        if name == "relax.broadcast_to" and before != shape:
            return None
        # the same channels where as many elements come before each (row-major order)
        prefix = math.prod(shape[:axis])
        same = [
            a
            for a in range(len(before))
            if math.prod(before[:a]) == prefix and before[a] == shape[axis]
        ]
        return [same[0], None] if same else None
    return None


def _output_axis(call: relax.Call, var: relax.Var, axis: int) -> int | None:
    """The axis of ``call``'s result that holds the channels ``var`` (its operand) holds along
    ``axis``; None: it mixes them."""
    shape = static_shape(call)
    for out in range(len(shape or [])):
        carried = _operand_axes(call, out)
        if carried is not None and all(
            x == axis for a, x in zip(call.args, carried) if a.same_as(var)
        ):
            return out
    return None


def _extreme_over(call: relax.Call, axis: int) -> bool:
    """``call`` is a max or min over ``axis`` of its operand (a dynamic quantization's range): its
    result holds no channel, whatever their order. (A sum would differ in its last bits.)"""
    shape = static_shape(call.args[0])
    if call.op.name not in ("relax.max", "relax.min") or shape is None:
        return False
    return call.attrs.axis is None or axis in {int(a) % len(shape) for a in call.attrs.axis}


def _integer_reader(call: relax.Call) -> bool:
    """A u8 x s8 -> s32 convolution or matmul with a constant weight: one whose weight's pairs
    matter."""
    return reads_channels(call) and multiplies_u8_by_s8(call)


def _channels(call: relax.Call) -> int:
    """The input's axis a reader reduces."""
    if call.op.name == "relax.matmul":
        return len(static_shape(call.args[0])) - 1
    return str(call.attrs.data_layout).index("C")


def _weight_reduction(call: relax.Call) -> int:
    """The weight's axis a reader reduces."""
    if call.op.name == "relax.matmul":
        return len(static_shape(call.args[1])) - 2
    return str(call.attrs.kernel_layout).index("I")


def _taken(arg: relax.Expr, order: np.ndarray, axis: int | None) -> relax.Expr:
    """A constant operand in the order along ``axis``; a variable (in the stream) as it is."""
    value = None if axis is None else constant_value(arg)
    return arg if value is None else taken_constant(value, order, axis)


def _bindings(func: relax.Function) -> list[tuple[relax.Var, relax.Expr]]:
    """Every binding of ``func``'s body, in order."""
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings]


def _rebound(func: relax.Function, values: dict) -> relax.Function:
    """``func`` with the bindings of ``values``' variables bound to their new values; a variable
    ``func`` does not bind yet (a copy) is bound just before the first binding that reads it."""
    bound = {var for var, _ in _bindings(func)}
    new = {v: e for v, e in values.items() if v not in bound}
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            value = values.get(b.var, b.value)
            bindings += [
                relax.VarBinding(v, new.pop(v)) for v in relax.analysis.free_vars(value) if v in new
            ]
            bindings.append(relax.VarBinding(b.var, value) if b.var in values else b)
        kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        blocks.append(kind(bindings))
    body = relax.SeqExpr(blocks, func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
