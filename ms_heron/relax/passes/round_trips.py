"""Round trips through quantization, shortened.

A QDQ graph quantizes a convolution's result and dequantizes it at once where a float op reads it:
a ResNet block's last convolution before the residual add, the stem before its max pool. Legalized,
that is a float -> u8 -> float round trip in the kernel's epilogue: a conversion to integers,
packing to bytes and back, and a conversion to float again, about a quarter of the epilogue's
instructions on AVX2 (the residual blocks' last convolutions ran at half their bound).

* ``dequantize(quantize(x, s, zp), s', zp)`` is ``clip(round(x / s), qmin - zp, qmax - zp) * s'``:
  ``round`` gives a whole number, adding and subtracting the zero point is exact in float, and so
  is the cast the round trip makes. The values are the same; only a zero may keep the sign of the
  rounded value (``-0.0``, which the next quantize reads as ``0``).
* ``quantize(dequantize(q, s, zp), s, zp)`` is ``q`` for a scale far from float32's limits:
  ``(q - zp) * s / s`` is then within far less than half a step of ``q - zp`` and rounds back.
* ``quantize(max_pool(y))`` is ``max_pool(quantize(y))``: a quantize with a positive scale never
  orders two values the other way, and pads where the pool pads (-inf quantizes to the least
  byte). So the stem's max pool reads bytes, not floats, and its dequantize and quantize meet and
  go.
"""

from __future__ import annotations

import numpy as np
from tvm import IRModule, relax
from tvm.relax.dpl import is_op, wildcard

from .guard import never_failing
from .quantized import as_one_element
from .sinking import constant_value, rewrite_calls, static_shape, values_used_once


@never_failing
@relax.transform.function_pass(opt_level=0, name="QuantizationRoundTrips")
def quantization_round_trips(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Move each quantize before the max pool it follows, drop each quantize of a dequantize with
    the same parameters, and compute each float quantize that only a dequantize reads in float."""
    func = _max_pools_on_bytes(func)
    func = _requantized_bytes_as_they_were(func)
    return _round_trips_in_float(func)


def _max_pools_on_bytes(func: relax.Function) -> relax.Function:
    """``quantize(max_pool2d(y))`` as ``max_pool2d(quantize(y))`` where only the quantize reads
    the pool and only the pool reads ``y``, and every scale is a positive constant."""
    once = values_used_once(func)
    y, scale, zero = wildcard(), wildcard(), wildcard()
    pool = is_op("relax.nn.max_pool2d")(y)

    def on_bytes(expr, matches):
        scales = constant_value(matches[scale])
        pooled = matches[pool]
        if scales is None or not (scales > 0).all() or pooled not in once:
            return expr
        if isinstance(matches[y], relax.Call) and matches[y] not in once:
            return expr
        quantized = relax.Call(expr.op, [matches[y], *expr.args[1:]], expr.attrs)
        return relax.Call(pooled.op, [quantized], pooled.attrs)

    return rewrite_calls(is_op("relax.quantize")(pool, scale, zero), on_bytes, func)


def _requantized_bytes_as_they_were(func: relax.Function) -> relax.Function:
    """``quantize(dequantize(q, s, zp), s, zp)`` as ``q`` (the same constants, dtype and axis;
    float32 between)."""
    q, scale, zero = wildcard(), wildcard(), wildcard()
    dequantize = is_op("relax.dequantize")(q, scale, zero)

    def as_they_were(expr, matches):
        inner = matches[dequantize]
        params = zip(expr.args[1:], (matches[scale], matches[zero]))
        if not all(_same_constant(a, b) for a, b in params) or not _exact_steps(matches[scale]):
            return expr
        if (
            str(expr.attrs.out_dtype) != str(matches[q].ty.dtype)
            or str(inner.ty.dtype) != "float32"
        ):
            return expr
        if int(expr.attrs.axis) != int(inner.attrs.axis) and not _one_value(matches[scale]):
            return expr
        return matches[q]

    return rewrite_calls(
        is_op("relax.quantize")(dequantize, wildcard(), wildcard()), as_they_were, func
    )


def _same_constant(a: relax.Expr, b: relax.Expr) -> bool:
    values = constant_value(a), constant_value(b)
    return (
        values[0] is not None
        and values[1] is not None
        and values[0].shape == values[1].shape
        and bool((values[0] == values[1]).all())
    )


def _exact_steps(scale: relax.Expr) -> bool:
    """Whether ``(q - zp) * s / s`` rounds back to ``q - zp`` for every byte: ``s`` far from
    float32's overflow and its denormals."""
    value = constant_value(scale)
    return value is not None and bool(((value >= 2.0**-100) & (value <= 2.0**100)).all())


def _round_trips_in_float(func: relax.Function) -> relax.Function:
    """Write each float quantize that only a dequantize of the same zero point reads (both with
    one scale for the whole tensor) as its rounding and clipping in float. The bounds go in as
    one-element tensors, as the scales do (:func:`~.quantized.quantization_parameters_as_tensors`),
    so that layers of one shape stay one tuning task."""
    once = values_used_once(func)
    x, scale, zero = wildcard(), wildcard(), wildcard()
    quantize = is_op("relax.quantize")(x, scale, zero)
    out_scale, out_zero = wildcard(), wildcard()

    def in_float(expr, matches):
        quantized, scales = matches[quantize], (matches[scale], matches[out_scale])
        bounds = _bounds(quantized, expr, matches[zero], matches[out_zero])
        if quantized not in once or bounds is None or not all(map(_one_value, scales)):
            return expr
        low, high = (relax.const(np.array([b], "float32")) for b in bounds)
        rounded = relax.op.round(relax.op.divide(matches[x], as_one_element(scales[0])))
        clipped = relax.op.maximum(relax.op.minimum(rounded, high), low)
        return relax.op.multiply(clipped, as_one_element(scales[1]))

    return rewrite_calls(is_op("relax.dequantize")(quantize, out_scale, out_zero), in_float, func)


def _bounds(
    quantized: relax.Call, dequantized: relax.Call, zero: relax.Expr, out_zero: relax.Expr
) -> tuple[int, int] | None:
    """``(qmin - zp, qmax - zp)`` of an 8-bit quantize; None unless both ends are float32 tensors
    and share one constant zero point."""
    values = [constant_value(zero), constant_value(out_zero)]
    if any(v is None or v.size != 1 for v in values) or values[0].item() != values[1].item():
        return None
    ends = (quantized.args[0], dequantized)
    if any(str(e.ty.dtype) != "float32" or not static_shape(e) for e in ends):
        return None  # a rank-0 tensor would broadcast to the bounds' shape
    dtype = str(quantized.attrs.out_dtype)
    if dtype not in ("int8", "uint8"):
        return None
    info, zp = np.iinfo(dtype), int(values[0].item())
    return info.min - zp, info.max - zp


def _one_value(scale: relax.Expr) -> bool:
    """Whether ``scale`` is one float32 value (a per-channel scale would need its axis)."""
    shape = static_shape(scale)
    return shape is not None and int(np.prod(shape)) == 1 and str(scale.ty.dtype) == "float32"
