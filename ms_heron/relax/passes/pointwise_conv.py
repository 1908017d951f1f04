"""Relax rewrite: 1x1 NCHW convolutions as matmuls over the flattened pixels.

A 1x1, stride-1, unpadded NCHW convolution is ``y[n, o, h, w] = sum_i W[o, i] x[n, i, h, w]``: a
matmul ``W @ x`` over ``h * w`` pixels, whose rows in ``x`` and ``y`` are contiguous. Left 4-D, its
pixels run along two loops, and the last (ResNet's 56, 28, 14, 7 columns) fills no whole vector: the
tuned kernels vectorize the output channels instead and write every tile back transposed. As a
matmul over ``[n, i, h * w]`` views the vector lanes run along the pixels of both the input and the
output, and the weight is the broadcast operand (re-laid out at compile time like any constant).

The views are ``R.memory.view`` (no copy, and never fused into a kernel), and they are moved past the
element-wise epilogue that follows (bias, residual add, activation), so that the epilogue is fused
into the matmul's kernel in 3-D; only the final result is viewed as 4-D again.
"""

from __future__ import annotations

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .sinking import LayoutChange, sink, static_shape

_VIEW = "relax.memory.view"


def _view(expr, shape: list[int]):
    return relax.op.memory.view(expr, relax.ShapeExpr(shape))


def _as_matmul(expr, matches, data, weight):
    """``conv2d(x, W)`` -> ``view(reshape(W, [o, i]) @ view(x, [n, i, h*w]), [n, o, h, w])`` when 1x1."""
    attrs = expr.attrs
    w_shape, x_shape = static_shape(matches[weight]), static_shape(matches[data])
    if (
        w_shape is None
        or x_shape is None
        or w_shape[2:] != [1, 1]
        or list(attrs.strides) != [1, 1]
        or any(int(p) for p in attrs.padding)
        or list(attrs.dilation) != [1, 1]
        or int(attrs.groups) != 1
        or (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW")
    ):
        return expr
    n, i, h, w = x_shape
    product = relax.op.matmul(
        relax.op.reshape(matches[weight], w_shape[:2]),
        _view(matches[data], [n, i, h * w]),
        out_dtype=str(expr.ty.dtype),
    )
    return _view(product, [n, w_shape[0], h, w])


def _flat_and_full(view: relax.Call) -> tuple[list[int], list[int]] | None:
    """The 3-D shape under a 4-D view and the view's 4-D shape, if both are static."""
    flat, full = static_shape(view.args[0]), static_shape(view)
    return (flat, full) if flat is not None and full is not None and len(flat) == 3 and len(full) == 4 else None


def _reapply_view(result, view: relax.Call):
    shapes = _flat_and_full(view)
    return None if shapes is None else _view(result, shapes[1])


def _flat_operand(expr, view: relax.Call):
    """The other operand of an element-wise op on ``view`` (flat -> full), in the flat form: a tensor of
    the full shape viewed flat (or unwrapped when it is a view of the flat form itself), a tensor that
    broadcasts over the pixels reshaped to ``[.., c, 1]``; None if it does neither."""
    shapes, shape = _flat_and_full(view), static_shape(expr)
    if shapes is None or shape is None:
        return None
    flat, full = shapes
    if shape == full:
        if isinstance(expr, relax.Call) and expr.op.name == _VIEW and static_shape(expr.args[0]) == flat:
            return expr.args[0]
        return _view(expr, flat)
    padded = [1] * (len(full) - len(shape)) + shape
    if len(padded) == 4 and padded[2:] == [1, 1]:
        return relax.op.reshape(expr, [*padded[:2], 1]) if shape else expr
    return None


#: A 4-D view of a 3-D matmul result.
_VIEW_CHANGE = LayoutChange(
    lambda inner: is_op(_VIEW)(inner, wildcard(), wildcard(), wildcard()), _reapply_view, _flat_operand
)


@relax.transform.function_pass(opt_level=0, name="PointwiseConvAsMatmul")
def pointwise_conv_as_matmul(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite every 1x1 NCHW convolution into a matmul over flattened pixels, its epilogue with it."""
    data, weight = wildcard(), wildcard()
    func = rewrite_call(is_op("relax.nn.conv2d")(data, weight), lambda e, m: _as_matmul(e, m, data, weight), func)
    return sink(func, _VIEW_CHANGE)
