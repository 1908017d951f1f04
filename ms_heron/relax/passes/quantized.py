"""Quantized (u8 x s8) matmuls and convolutions from ONNX, in the form that reaches VNNI.

ONNX's ``MatMulInteger`` -- what ONNX Runtime's quantizer writes -- imports as
``matmul(astype(a_u8, i32) - zp, astype(w_s8, i32))``: an int32 x int32 product no int8
instruction can execute. The rewrite keeps the operands 8-bit and moves the zero point out of the
product, ``sum_k (a - zp) w = sum_k a w - zp * sum_k w``, so the matmul is u8 x s8 -> s32
(VNNI's ``vpdpbusd``) and the correction is a constant column sum folded at compile time. The
zero point may be computed at run time (``DynamicQuantizeLinear``, as ``quantize_dynamic`` writes).

``quantize_static`` in QDQ format writes no integer operator at all: a float Conv or MatMul between
``DequantizeLinear``s of a u8 activation and an s8 weight. :func:`integer_qdq` gives it the same u8
x s8 form, with the product of the two scales applied to the int32 result.

``ConvInteger`` has no Relax importer at all; :func:`onnx_converters` supplies one that builds the
same form: the input padded with its zero point (which ONNX Runtime's kernel pads with, so that the
padding counts as a real zero), a u8 x s8 -> s32 convolution, and the constant correction. The
convolution runs channels-last (NHWC): VNNI's 4-deep reduction and 16 output lanes need the input
channels and the output channels contiguous, which NCHW has for neither; the transposes around it
are fused into the element-wise passes a quantized model has between its convolutions anyway
(quantize before, rescale after): :func:`channels_last_epilogues` moves the transpose back to NCHW
past the rescale, so that it runs in the convolution's kernel, and cancels it against the next
convolution's transpose to NHWC.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, wildcard

from .guard import never_failing
from .sinking import (
    BINARY,
    POOLS,
    REDUCTIONS,
    LayoutChange,
    constant_value,
    rewrite_calls,
    sink,
    static_shape,
)


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _integer_matmul(activation, zero_point, weight: np.ndarray):
    """``matmul(activation - zero_point, weight)`` as u8 x s8 -> s32 and a constant-column-sum
    correction (``zero_point``: a scalar expression, or None for 0)."""
    product = relax.op.matmul(activation, relax.const(weight.astype(np.int8)), out_dtype="int32")
    if zero_point is None:
        return product
    column_sums = relax.const(weight.astype(np.int32).sum(axis=0, keepdims=True))
    if _dtype(zero_point) != "int32":
        zero_point = relax.op.astype(zero_point, "int32")
    return relax.op.subtract(product, relax.op.multiply(zero_point, column_sums))


def _int8_values(weight: np.ndarray | None, zero: np.ndarray | None = None) -> np.ndarray | None:
    """A constant weight's values less its zero point, if they are those of an s8 tensor."""
    if weight is None or (zero is not None and np.any(zero)):
        return None
    if weight.dtype != np.int8 and (
        weight.dtype.kind not in "iu" or weight.min() < -128 or weight.max() > 127
    ):
        return None
    return weight


def _widened_matmul():
    """(pattern, rewriter) for a matmul of a widened u8 activation (less a scalar zero point,
    constant or computed as DynamicQuantizeLinear does) by a constant 2-D s8 weight, in any form the
    importer or constant folding leaves it: the constant, widened, or widened less a zero point of
    0."""
    act, zero_point, weight, weight_zero = wildcard(), wildcard(), is_const(), is_const()
    widened_act = is_op("relax.astype")(act)
    activation = widened_act | is_op("relax.subtract")(widened_act, zero_point)
    widened_weight = is_op("relax.astype")(weight)
    weights = (
        weight
        | widened_weight
        | is_op("relax.subtract")(widened_weight, is_op("relax.astype")(weight_zero))
    )
    pattern = is_op("relax.matmul")(activation, weights)

    def rewrite(expr, matches):
        w = _int8_values(
            constant_value(matches[weight]),
            constant_value(matches[weight_zero]) if weight_zero in matches else None,
        )
        zp = matches[zero_point] if zero_point in matches else None
        if (
            _dtype(expr) != "int32"
            or _dtype(matches[act]) != "uint8"
            or w is None
            or w.ndim != 2
            or (zp is not None and static_shape(zp) not in ([], [1]))
        ):
            return expr
        return _integer_matmul(matches[act], zp, w)

    return pattern, rewrite


@never_failing
@relax.transform.function_pass(opt_level=0, name="KeepInt8Matmuls")
def keep_int8_matmuls(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite every widened u8 x s8 matmul with a constant 2-D weight into a u8 x s8 -> s32 one
    (what TVM's importer makes of ONNX's ``MatMulInteger``)."""
    return rewrite_calls(*_widened_matmul(), func)


def _dequantized(pattern_of_quantized):
    """A pattern for ``dequantize(q, scale, zero_point)`` with constant scale and zero point."""
    return is_op("relax.dequantize")(pattern_of_quantized, is_const(), is_const())


def _qdq_operands(expr, act_dq: relax.Call, weight_dq: relax.Call, weight_axis: int, out_axis: int):
    """The operands of ``expr`` between DequantizeLinears ``act_dq`` and ``weight_dq`` as (u8
    activation, its zero point, s8 weight, the scale of the integer product, per weight channel
    ``weight_axis`` along output axis ``out_axis``), or None when it has no u8 x s8 form: a non-u8
    activation, a scale or zero point per element of the activation, a weight that is not s8 with
    zero point 0, a weight scale along another axis."""
    act, (act_scale, act_zero) = act_dq.args[0], (constant_value(a) for a in act_dq.args[1:])
    weight, weight_scale, weight_zero = (constant_value(a) for a in weight_dq.args)
    weight = _int8_values(weight, weight_zero)
    if _dtype(act) != "uint8" or weight is None or act_scale.size != 1 or act_zero.size != 1:
        return None
    channels = weight.shape[weight_axis]
    if weight_scale.size > 1 and (
        int(weight_dq.attrs.axis) != weight_axis or weight_scale.shape != (channels,)
    ):
        return None
    # one scale per output channel even when the weight has one: an argument of the kernel, not a
    # literal in it, so that layers of one shape share a tuning task (see
    # quantization_parameters_as_tensors)
    scale = np.broadcast_to(
        act_scale.astype(np.float64) * weight_scale.reshape(-1), (channels,)
    ).astype(np.float32)
    rank = len(static_shape(expr))
    scale = scale.reshape([-1 if axis == out_axis % rank else 1 for axis in range(rank)])
    return act, int(act_zero.reshape(())), weight, relax.const(scale)


def _qdq_rules() -> list:
    """(pattern, rewriter) for Conv and MatMul between DequantizeLinears."""
    act_dq, weight_dq = _dequantized(wildcard()), _dequantized(is_const())
    conv = is_op("relax.nn.conv2d")(act_dq, weight_dq)
    matmul = is_op("relax.matmul")(act_dq, weight_dq)

    def rewrite_conv(expr, matches):
        attrs = expr.attrs
        operands = _qdq_operands(
            expr, matches[act_dq], matches[weight_dq], weight_axis=0, out_axis=1
        )
        if operands is None or (attrs.data_layout, attrs.kernel_layout, int(attrs.groups)) != (
            "NCHW",
            "OIHW",
            1,
        ):
            return expr
        x, zero, w, scale = operands
        acc = integer_conv2d(
            x,
            relax.const(w.astype(np.int8)),
            zero,
            [int(p) for p in attrs.padding],
            strides=[int(s) for s in attrs.strides],
            dilations=[int(d) for d in attrs.dilation],
        )
        return relax.op.multiply(relax.op.astype(acc, _dtype(expr)), scale)

    def rewrite_matmul(expr, matches):
        operands = _qdq_operands(
            expr, matches[act_dq], matches[weight_dq], weight_axis=1, out_axis=-1
        )
        if operands is None or operands[2].ndim != 2:
            return expr
        x, zero, w, scale = operands
        acc = _integer_matmul(x, relax.const(zero, "int32") if zero else None, w)
        return relax.op.multiply(relax.op.astype(acc, _dtype(expr)), scale)

    return [(conv, rewrite_conv), (matmul, rewrite_matmul)]


@never_failing
@relax.transform.function_pass(opt_level=0, name="IntegerQDQ")
def integer_qdq(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite every Conv and MatMul whose operands are DequantizeLinears of a u8 activation and a
    constant s8 weight (ONNX Runtime's ``quantize_static`` in QDQ format) as a u8 x s8 -> s32 kernel
    with the two scales applied to its result. Runs before constant folding, which would turn the
    dequantized weight into floats."""
    for pattern, rewriter in _qdq_rules():
        func = rewrite_calls(pattern, rewriter, func)
    return func


def _same_pads(in_shape, kernel, strides, dilations, mode: str) -> list[int]:
    """ONNX ``auto_pad`` SAME_UPPER / SAME_LOWER as explicit ``[begins..., ends...]``."""
    begins, ends = [], []
    for size, k, s, d in zip(in_shape, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    return begins + ends


def _no_vnni_form(x_dtype: str, w_dtype: str, x_zero, w_zero, groups: int) -> str:
    """Why a ConvInteger has no u8 x s8 form VNNI runs ("" if it has one)."""
    if (x_dtype, w_dtype) != ("uint8", "int8"):
        return f"VNNI multiplies u8 by s8, not {x_dtype} by {w_dtype}"
    if x_zero is None or x_zero.size != 1:
        return "its input zero point is not one constant"
    if w_zero is None or np.any(w_zero):
        return "its weight has a zero point other than 0"
    return f"it is grouped ({groups} groups)" if groups != 1 else ""


def conv_integer(inputs, attr):
    """ONNX ``ConvInteger`` (2-D, NCHW in and out) as Relax; see the module docstring."""
    x, w = inputs[0], inputs[1]
    x_zp = inputs[2] if len(inputs) > 2 else None
    w_zp = inputs[3] if len(inputs) > 3 else None
    x_shape, w_shape = [int(d) for d in x.ty.shape.values], [int(d) for d in w.ty.shape.values]
    if len(x_shape) != 4:
        raise NotImplementedError(
            f"ConvInteger on {len(x_shape)}-D inputs: only 2-D convolutions (NCHW) are supported"
        )
    strides = list(attr.get("strides", [1, 1]))
    dilations = list(attr.get("dilations", [1, 1]))
    groups = int(attr.get("group", 1))
    auto_pad = attr.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(x_shape[2:], w_shape[2:], strides, dilations, auto_pad)
    else:
        pads = [0] * 4 if auto_pad == "VALID" else list(attr.get("pads", [0] * 4))
    x_zero = constant_value(x_zp) if x_zp is not None else np.zeros((), "int32")
    w_zero = constant_value(w_zp) if w_zp is not None else np.zeros((), "int32")
    conv = dict(strides=strides, dilation=dilations, groups=groups, out_dtype="int32")
    why = _no_vnni_form(_dtype(x), _dtype(w), x_zero, w_zero, groups)
    if why:
        warnings.warn(
            f"ConvInteger {x_shape} x {w_shape}: {why}, so it runs as an int32 convolution without "
            "VNNI"
        )
        widened_x = (
            relax.op.subtract(relax.op.astype(x, "int32"), relax.op.astype(x_zp, "int32"))
            if x_zp is not None
            else relax.op.astype(x, "int32")
        )
        widened_w = relax.op.astype(w, "int32")
        if w_zp is not None:
            w_zp32 = relax.op.astype(w_zp, "int32")
            widened_w = relax.op.subtract(
                widened_w,
                relax.op.reshape(w_zp32, [-1, 1, 1, 1]) if len(w_zp.ty.shape) == 1 else w_zp32,
            )
        return relax.op.nn.conv2d(widened_x, widened_w, padding=pads, **conv)
    return integer_conv2d(x, w, int(x_zero.reshape(())), pads, strides=strides, dilations=dilations)


def integer_conv2d(x, w, zero: int, pads, *, strides, dilations):
    """``conv2d(x - zero, w)`` in int32 (NCHW in and out) for a u8 ``x`` and an s8 OIHW ``w``, as a
    channels-last u8 x s8 convolution (see the module docstring); ``pads`` is ONNX's (and Relax's)
    ``[top, left, bottom, right]``."""
    if any(pads):
        x = relax.op.nn.pad(
            x, [0, 0, 0, 0, pads[0], pads[2], pads[1], pads[3]], pad_value=float(zero)
        )
    y = relax.op.nn.conv2d(
        relax.op.permute_dims(x, [0, 2, 3, 1]),
        relax.op.permute_dims(w, [0, 2, 3, 1]),
        strides=strides,
        dilation=dilations,
        data_layout="NHWC",
        kernel_layout="OHWI",
        out_dtype="int32",
    )
    if zero:
        # per output channel, NHWC's last axis
        sums = relax.op.sum(relax.op.astype(w, "int32"), axis=[1, 2, 3])
        y = relax.op.subtract(y, relax.op.multiply(relax.const(zero, "int32"), sums))
    return relax.op.permute_dims(y, [0, 3, 1, 2])


def as_one_element(expr):
    """A scalar constant as a one-element tensor, an argument of the kernel rather than a literal
    in it (anything else as it is)."""
    value = constant_value(expr)
    return relax.const(value.reshape(1)) if value is not None and value.ndim == 0 else expr


@never_failing
@relax.transform.function_pass(opt_level=0, name="QuantizationParametersAsTensors")
def quantization_parameters_as_tensors(
    func: relax.Function, _mod: IRModule, _ctx
) -> relax.Function:
    """Give every quantize and dequantize its scalar constant scale and zero point as one-element
    tensors, and likewise a constant scale multiplying a run-time one. Legalized, a scalar constant
    is a literal in the kernel, so a quantized network's layers of one shape (each with its own
    scales) would be as many tuning tasks; a one-element tensor is an argument, and they are one."""
    scale, zero_point = wildcard(), wildcard()

    def as_tensors(expr, matches):
        args = [as_one_element(matches[scale]), as_one_element(matches[zero_point])]
        if all(new.same_as(old) for new, old in zip(args, expr.args[1:])):
            return expr
        return relax.Call(expr.op, [expr.args[0], *args], expr.attrs)

    for op in ("relax.quantize", "relax.dequantize"):
        func = rewrite_calls(is_op(op)(wildcard(), scale, zero_point), as_tensors, func)
    return rewrite_calls(
        is_op("relax.multiply")(wildcard(), wildcard()), _runtime_scale_times_constant, func
    )


def _runtime_scale_times_constant(expr: relax.Call, _matches) -> relax.Expr:
    """``quantize_dynamic``'s ``Mul(x_scale, W_scale)``: the activation's scale, computed at run
    time, times the layer's constant weight scale, a scalar that would be a literal in the matmul's
    kernel (twelve BERT layers, twelve tasks per matmul). The constant goes in as a one-element
    tensor, reshaped back to a scalar so that the product keeps its shape."""
    args = list(expr.args)
    for i, (arg, other) in enumerate(((args[0], args[1]), (args[1], args[0]))):
        value = constant_value(arg)
        if (
            value is not None
            and value.shape == ()
            and value.dtype.kind == "f"
            and _runtime_scalar(other)
        ):
            args[i] = relax.op.reshape(as_one_element(arg), [])
            return relax.Call(expr.op, args, expr.attrs)
    return expr


def _runtime_scalar(expr) -> bool:
    return constant_value(expr) is None and static_shape(expr) == []


def _reapply_permute(result, permute: relax.Call):
    return relax.op.permute_dims(result, permute.attrs.axes)


def _unpermuted_operand(expr, permute: relax.Call):
    """The other operand of an element-wise op on ``permute(y)`` in ``y``'s layout: a scalar as it
    is, a vector over one axis (a per-channel bias) reshaped to that axis's place in ``y``; None for
    anything larger, which would be read transposed inside the kernel."""
    shape, full = static_shape(expr), static_shape(permute)
    if shape is None or full is None or len(shape) > len(full):
        return None
    padded = [1] * (len(full) - len(shape)) + shape
    spread = [axis for axis, size in enumerate(padded) if size != 1]
    if not spread:
        return expr
    if len(spread) > 1:
        return None
    axes = [int(a) for a in permute.attrs.axes]
    moved = [1] * len(full)
    moved[axes[spread[0]]] = padded[spread[0]]
    return relax.op.reshape(expr, moved)


#: A transpose (``permute_dims``), e.g. from the channels-last convolution back to NCHW.
_PERMUTE = LayoutChange(
    lambda inner: is_op("relax.permute_dims")(inner), _reapply_permute, _unpermuted_operand
)


def _layout_rules() -> list:
    """Pads move past transposes too, two transposes in a row become one (or none), and a binary
    element-wise op of two tensors transposed alike becomes one transpose after it."""
    inner = wildcard()
    permuted = is_op("relax.permute_dims")(inner)

    def pad_first(expr, matches):
        axes = [int(a) for a in matches[permuted].attrs.axes]
        widths = [int(w) for w in expr.attrs.pad_width]
        moved = [0] * len(widths)
        for axis, source in enumerate(axes):
            moved[2 * source : 2 * source + 2] = widths[2 * axis : 2 * axis + 2]
        padded = relax.op.nn.pad(
            matches[inner],
            moved,
            pad_mode=expr.attrs.pad_mode,
            pad_value=float(expr.attrs.pad_value),
        )
        return relax.op.permute_dims(padded, axes)

    def compose(expr, matches):
        first = [int(a) for a in matches[permuted].attrs.axes]
        axes = [first[int(a)] for a in expr.attrs.axes]
        return (
            matches[inner] if axes == sorted(axes) else relax.op.permute_dims(matches[inner], axes)
        )

    # op(permute(a), permute(b)) = permute(op(a, b)), as a residual add
    def both_permuted(expr, matches):
        first, second = matches[permuted], matches[other_permuted]
        if [int(a) for a in first.attrs.axes] != [int(a) for a in second.attrs.axes]:
            return expr
        if static_shape(matches[inner]) != static_shape(matches[other]):
            return expr
        return relax.op.permute_dims(
            relax.Call(expr.op, [matches[inner], matches[other]], expr.attrs), first.attrs.axes
        )

    # a pooling in the layout the transpose came from (the stem's max pool between two int8
    # convolutions), so the transposes around it meet and cancel
    def pool_first(expr, matches):
        axes, attrs = [int(a) for a in matches[permuted].attrs.axes], expr.attrs
        layout = str(attrs.layout)
        inner_layout = "".join(layout[axes.index(axis)] for axis in range(len(axes)))
        if str(attrs.out_layout) != layout or inner_layout not in ("NCHW", "NHWC"):
            return expr
        pooled = _op_function(expr.op.name)(
            matches[inner],
            [int(v) for v in attrs.pool_size],
            [int(v) for v in attrs.strides],
            [int(v) for v in attrs.padding],
            [int(v) for v in attrs.dilation],
            bool(attrs.ceil_mode),
            bool(attrs.count_include_pad),
            layout=inner_layout,
            out_layout=inner_layout,
        )
        return relax.op.permute_dims(pooled, axes)

    # a reduction (the global average pool at the end) over the same axes where they came from
    def reduce_first(expr, matches):
        axes = [int(a) for a in matches[permuted].attrs.axes]
        if expr.attrs.axis is None:
            return relax.Call(expr.op, [matches[inner]], expr.attrs)
        reduced = sorted(int(a) % len(axes) for a in expr.attrs.axis)
        result = _op_function(expr.op.name)(
            matches[inner], [axes[a] for a in reduced], bool(expr.attrs.keepdims)
        )
        if expr.attrs.keepdims:
            return relax.op.permute_dims(result, axes)
        kept = [axes[a] for a in range(len(axes)) if a not in reduced]
        order = [sorted(kept).index(a) for a in kept]
        return result if order == sorted(order) else relax.op.permute_dims(result, order)

    other = wildcard()
    other_permuted = is_op("relax.permute_dims")(other)
    return [
        (is_op("relax.nn.pad")(permuted), pad_first),
        (is_op("relax.permute_dims")(permuted), compose),
        *[(is_op(op)(permuted, other_permuted), both_permuted) for op in BINARY],
        *[(is_op(op)(permuted), pool_first) for op in POOLS],
        *[(is_op(op)(permuted), reduce_first) for op in REDUCTIONS],
    ]


def _op_function(name: str):
    """The ``relax.op`` function that builds op ``name`` (``relax.nn.max_pool2d``:
    ``relax.op.nn.max_pool2d``)."""
    return functools.reduce(getattr, name.split(".")[1:], relax.op)


@never_failing
@relax.transform.function_pass(opt_level=0, name="ChannelsLastEpilogues")
def channels_last_epilogues(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Move transposes past element-wise ops and pads, and cancel transposes that undo each
    other."""
    return sink(func, _PERMUTE, _layout_rules())
