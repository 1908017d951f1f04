"""Constant s8 weights on a CPU without VNNI: narrow ones stay bytes, most others are paired anew
along their reduction, the rest widen.

On a CPU without VNNI the exact dot product multiplies s16 (``vpmaddwd``, two products per lane):
:func:`s16_weights` stores such weights widened, once at compile time, so that no kernel widens
them per step. Where no pair of weights the faster ``vpmaddubsw`` sums (four bytes per lane) can
overflow s16 (:func:`~ms_heron.hardware.dot_products.bytes_multiply_exactly`: the 7-bit weights of
ONNX Runtime's ``reduce_range`` quantization, which its guide suggests for such CPUs, and any
weight whose large values pair with small or opposite ones), the bytes are multiplied as they are.
Most 8-bit weights fit too once their reduction rows are paired in another order
(:func:`~ms_heron.hardware.dot_products.narrowing_order`): the weight is stored in that order and
the activation's channels are taken in it (a copy). That is a constraint on data, not on shapes:
the values are known only here, where the weights are constants, so this pass states it on the
function (:data:`~ms_heron.hardware.dot_products.NARROW_WEIGHTS`) and the Tensorize rule offers the
faster intrinsic only to functions whose weights satisfy it.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target

from ...hardware.dot_products import (
    NARROW_WEIGHTS,
    bytes_multiply_exactly,
    dot_product,
    narrowing_order,
)
from ...schedule.analysis import param_index
from .channel_orders import channel_copy, multiplies_u8_by_s8, paired_channels, taken_constant
from .guard import never_failing
from .sinking import constant_value, rewrite_calls, tir_calls


@never_failing
@relax.transform.function_pass(opt_level=0, name="S16Weights")
def s16_weights(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Store the constant s8 weight of every u8 x s8 -> s32 convolution and matmul as s16 where
    the current target's exact dot product multiplies s16 pairs (AVX2, AVX-512BW without VNNI),
    unless its weights are narrow (those multiply as bytes) or pair narrowly in another order of
    the reduction (:func:`~ms_heron.hardware.dot_products.narrowing_order`; the activation's
    channels are then taken in that order too, a copy that costs far less than the widened
    weight's dot product). Elsewhere it changes nothing."""
    target = Target.current(allow_none=True)
    dot = dot_product(target) if target is not None else None
    if dot is None or not dot.widens:
        return func
    pattern = is_op("relax.nn.conv2d")(wildcard(), is_const()) | is_op("relax.matmul")(
        wildcard(), is_const()
    )

    def narrow_or_widen(expr, _matches):
        activation, weight = expr.args
        values = constant_value(weight)
        axis = _paired_axis(expr, values.ndim)
        if not multiplies_u8_by_s8(expr) or bytes_multiply_exactly(values, axis):
            return expr
        channels = paired_channels(expr)
        order = None if None in (channels, axis) else narrowing_order(values, axis)
        if order is None:
            return relax.Call(
                expr.op, [activation, relax.const(values.astype(np.int16))], expr.attrs
            )
        taken = channel_copy(activation, order, channels)
        return relax.Call(expr.op, [taken, taken_constant(values, order, axis)], expr.attrs)

    return rewrite_calls(pattern, narrow_or_widen, func)


@never_failing
@tvm.transform.module_pass(opt_level=0, name="RecordNarrowWeights")
def record_narrow_weights(mod: IRModule, _ctx) -> IRModule:
    """Mark each TIR function's parameters that every call passes a narrow s8 constant."""
    narrow: dict[tvm.ir.GlobalVar, set[int]] = {}
    wide: dict[tvm.ir.GlobalVar, set[int]] = {}
    for callee, args in tir_calls(mod):
        for index, arg in enumerate(args):
            values = constant_value(arg)
            # the paired axis only for s8 constants: finding it schedules the function
            fits = (
                values is not None
                and values.dtype == np.int8
                and bytes_multiply_exactly(values, _reduced_axis(mod[callee], index))
            )
            (narrow if fits else wide).setdefault(callee, set()).add(index)
    for gvar, indices in narrow.items():
        indices = sorted(indices - wide.get(gvar, set()))
        if indices:
            mod[gvar] = mod[gvar].with_attr(NARROW_WEIGHTS, indices)
    return mod


def _paired_axis(call: relax.Call, ndim: int) -> int | None:
    """The weight axis the dot product pairs, as the op's TIR will reduce it innermost: a matmul's
    K, a channels-last convolution's input channels (None: another layout, pairing unknown)."""
    if call.op.name == "relax.matmul":
        return max(0, ndim - 2)
    data, kernel = str(call.attrs.data_layout), str(call.attrs.kernel_layout)
    return kernel.index("I") if data.endswith("C") and "I" in kernel else None


def _reduced_axis(func, index: int) -> int | None:
    """The axis of parameter ``index`` that its reading block's innermost reduction iterator
    indexes -- the one the Tensorize rule splits into dot-product steps, so the one it pairs --
    or None when no block reads it so."""
    if not isinstance(func, tvm.tirx.PrimFunc):
        return None
    sch = Schedule(func)
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except ScheduleError:  # a hand-written function without blocks: the pairing is not known
        return None
    for block in blocks:
        stmt = sch.get(block)
        reduced = [iv.var for iv in stmt.iter_vars if iv.iter_type == tvm.tirx.IterVar.CommReduce]
        for region in stmt.reads:
            if reduced and param_index(sch, region.source) == index:
                dims = [d for d, r in enumerate(region.region) if r.min.same_as(reduced[-1])]
                return dims[0] if len(dims) == 1 else None
    return None
