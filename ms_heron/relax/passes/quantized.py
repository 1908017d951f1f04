"""Quantized (u8 x s8) matmuls and convolutions from ONNX, in the form that reaches VNNI.

ONNX's ``MatMulInteger`` -- what ONNX Runtime's quantizer writes -- imports as
``matmul(astype(a_u8, i32) - zp, astype(w_s8, i32))``: an int32 x int32 product no int8
instruction can execute. The rewrite keeps the operands 8-bit and moves the zero point out of the
product, ``sum_k (a - zp) w = sum_k a w - zp * sum_k w``, so the matmul is u8 x s8 -> s32
(VNNI's ``vpdpbusd``) and the correction is a constant column sum folded at compile time.

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

import warnings

import numpy as np
from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from .sinking import LayoutChange, constant_value, sink, static_shape


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _u8_s8_matmul(activation, weight):
    return relax.op.matmul(activation, weight, out_dtype="int32")


def _patterns():
    """(pattern, rewriter) for ``matmul((a - zp), w)`` and ``matmul(a, w)`` over widened 8-bit inputs."""
    act, zero_point, weight = wildcard(), is_const(), is_const()
    widened_act = is_op("relax.astype")(act)
    widened_weight = is_op("relax.astype")(weight)
    with_zp = is_op("relax.matmul")(
        is_op("relax.subtract")(widened_act, is_op("relax.astype")(zero_point)), widened_weight
    )
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
        raise NotImplementedError(f"ConvInteger on {len(x_shape)}-D inputs: only 2-D convolutions (NCHW) are supported")
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
        warnings.warn(f"ConvInteger {x_shape} x {w_shape}: {why}, so it runs as an int32 convolution without VNNI")
        widened_x = (
            relax.op.subtract(relax.op.astype(x, "int32"), relax.op.astype(x_zp, "int32"))
            if x_zp is not None
            else relax.op.astype(x, "int32")
        )
        widened_w = relax.op.astype(w, "int32")
        if w_zp is not None:
            w_zp32 = relax.op.astype(w_zp, "int32")
            widened_w = relax.op.subtract(
                widened_w, relax.op.reshape(w_zp32, [-1, 1, 1, 1]) if len(w_zp.ty.shape) == 1 else w_zp32
            )
        return relax.op.nn.conv2d(widened_x, widened_w, padding=pads, **conv)
    zero = int(x_zero.reshape(()))
    if any(pads):
        x = relax.op.nn.pad(x, [0, 0, 0, 0, pads[0], pads[2], pads[1], pads[3]], pad_value=float(zero))
    y = relax.op.nn.conv2d(
        relax.op.permute_dims(x, [0, 2, 3, 1]),
        relax.op.permute_dims(w, [0, 2, 3, 1]),
        data_layout="NHWC",
        kernel_layout="OHWI",
        **conv,
    )
    if zero:
        sums = relax.op.sum(relax.op.astype(w, "int32"), axis=[1, 2, 3])  # per output channel, NHWC's last axis
        y = relax.op.subtract(y, relax.op.multiply(relax.const(zero, "int32"), sums))
    return relax.op.permute_dims(y, [0, 3, 1, 2])


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
_PERMUTE = LayoutChange(lambda inner: is_op("relax.permute_dims")(inner), _reapply_permute, _unpermuted_operand)


def _layout_rules() -> list:
    """Pads move past transposes too, and two transposes in a row become one (or none)."""
    inner = wildcard()
    permuted = is_op("relax.permute_dims")(inner)

    def pad_first(expr, matches):
        axes = [int(a) for a in matches[permuted].attrs.axes]
        widths = [int(w) for w in expr.attrs.pad_width]
        moved = [0] * len(widths)
        for axis, source in enumerate(axes):
            moved[2 * source : 2 * source + 2] = widths[2 * axis : 2 * axis + 2]
        padded = relax.op.nn.pad(
            matches[inner], moved, pad_mode=expr.attrs.pad_mode, pad_value=float(expr.attrs.pad_value)
        )
        return relax.op.permute_dims(padded, axes)

    def compose(expr, matches):
        first = [int(a) for a in matches[permuted].attrs.axes]
        axes = [first[int(a)] for a in expr.attrs.axes]
        return matches[inner] if axes == sorted(axes) else relax.op.permute_dims(matches[inner], axes)

    return [(is_op("relax.nn.pad")(permuted), pad_first), (is_op("relax.permute_dims")(permuted), compose)]


@relax.transform.function_pass(opt_level=0, name="ChannelsLastEpilogues")
def channels_last_epilogues(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Move transposes past element-wise ops and pads, and cancel transposes that undo each other."""
    return sink(func, _PERMUTE, _layout_rules())
