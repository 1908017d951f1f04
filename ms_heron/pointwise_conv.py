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

import tvm_ffi
from tvm import IRModule, relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

#: Element-wise Relax ops a 4-D view is moved past (one operand, or two broadcasting operands).
_UNARY = ("relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.astype", "relax.exp",
          "relax.erf", "relax.nn.gelu", "relax.nn.silu", "relax.negative", "relax.sqrt")
_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum")
_VIEW = "relax.memory.view"


def _shape(expr) -> list[int] | None:
    shape = getattr(expr.ty, "shape", None)
    dims = getattr(shape, "values", None)
    try:
        return None if dims is None else [int(d) for d in dims]
    except TypeError:  # a symbolic dimension
        return None


def _view(expr, shape: list[int]):
    return relax.op.memory.view(expr, relax.ShapeExpr(shape))


def _as_matmul(expr, matches, data, weight):
    """``conv2d(x, W)`` -> ``view(reshape(W, [o, i]) @ view(x, [n, i, h*w]), [n, o, h, w])`` when 1x1."""
    attrs = expr.attrs
    w_shape, x_shape = _shape(matches[weight]), _shape(matches[data])
    if (w_shape is None or x_shape is None or w_shape[2:] != [1, 1] or list(attrs.strides) != [1, 1]
            or any(int(p) for p in attrs.padding) or list(attrs.dilation) != [1, 1] or int(attrs.groups) != 1
            or (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW")):
        return expr
    n, i, h, w = x_shape
    product = relax.op.matmul(relax.op.reshape(matches[weight], w_shape[:2]), _view(matches[data], [n, i, h * w]),
                              out_dtype=str(expr.ty.dtype))
    return _view(product, [n, w_shape[0], h, w])


def _flat_operand(expr, full: list[int], flat: list[int]):
    """The other operand of an element-wise op on ``view(flat -> full)``, in the flat form: a tensor of
    the full shape viewed flat (or unwrapped when it is a view of the flat form itself), a tensor that
    broadcasts over the pixels reshaped to ``[.., c, 1]``; None if it does neither."""
    shape = _shape(expr)
    if shape is None:
        return None
    if shape == full:
        if isinstance(expr, relax.Call) and expr.op.name == _VIEW and _shape(expr.args[0]) == flat:
            return expr.args[0]
        return _view(expr, flat)
    padded = [1] * (len(full) - len(shape)) + shape
    if len(padded) == 4 and padded[2:] == [1, 1]:
        return relax.op.reshape(expr, [*padded[:2], 1]) if shape else expr
    return None


def _flat_and_full(expr, flat_expr) -> tuple[list[int], list[int]] | None:
    """The 3-D shape under a 4-D view and the 4-D shape of the element-wise op on it, if both are static."""
    flat, full = _shape(flat_expr), _shape(expr)
    return (flat, full) if flat is not None and full is not None and len(flat) == 3 and len(full) == 4 else None


def _sinks():
    """(pattern, rewriter) pairs moving a 4-D view of a 3-D tensor past one element-wise op."""
    rules = []
    for op in _UNARY:
        inner = wildcard()
        pattern = is_op(op)(is_op(_VIEW)(inner, wildcard(), wildcard(), wildcard()))

        def unary(expr, matches, inner=inner):
            shapes = _flat_and_full(expr, matches[inner])
            if shapes is None:
                return expr
            return _view(relax.Call(expr.op, [matches[inner], *expr.args[1:]], expr.attrs), shapes[1])

        rules.append((pattern, unary))
    for op in _BINARY:
        for side in (0, 1):
            inner, other = wildcard(), wildcard()
            view = is_op(_VIEW)(inner, wildcard(), wildcard(), wildcard())
            pattern = is_op(op)(view, other) if side == 0 else is_op(op)(other, view)

            def binary(expr, matches, inner=inner, other=other, side=side):
                shapes = _flat_and_full(expr, matches[inner])
                if shapes is None:
                    return expr
                flat, full = shapes
                operand = _flat_operand(matches[other], full, flat)
                if operand is None:
                    return expr
                args = [matches[inner], operand] if side == 0 else [operand, matches[inner]]
                return _view(relax.Call(expr.op, args, expr.attrs), full)

            rules.append((pattern, binary))
    return rules


@relax.transform.function_pass(opt_level=0, name="PointwiseConvAsMatmul")
def pointwise_conv_as_matmul(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite every 1x1 NCHW convolution into a matmul over flattened pixels, its epilogue with it."""
    data, weight = wildcard(), wildcard()
    func = rewrite_call(is_op("relax.nn.conv2d")(data, weight), lambda e, m: _as_matmul(e, m, data, weight), func)
    sinks = _sinks()
    while True:  # each pass moves the views one element-wise op further
        before = func
        for pattern, rewriter in sinks:
            func = rewrite_call(pattern, rewriter, func)
        if tvm_ffi.structural_equal(before, func):
            return func
