"""Relax rewrite: a window average across channels (LRN's) as element-wise ops that fuse into one
kernel.

TVM's ONNX importer writes ``LRN`` as a square, an ``expand_dims``, an average pool over a
``(size, 1, 1)`` window of the new depth axis, a ``squeeze``, then the scale, power and divide. The
pool is a reduction kernel of its own between two copies, so one LRN runs as four kernels over the
tensor. Its window sum is ``size`` shifted slices of the channel-padded squares: all injective, so
Relax's FuseOps puts the whole LRN (squares, window, scale, power, divide) into one kernel, the form
ONNX Runtime runs. (In a channels-last model the kernel reads its input through a transpose, as
``nn.pad`` has no layout rule: an index map inside the one kernel, not a copy.)
"""

from __future__ import annotations

import functools

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, wildcard

from .guard import never_failing
from .sinking import rewrite_calls, static_shape

_POOLS = ("relax.nn.avg_pool2d", "relax.nn.avg_pool3d")


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _window_mean(expr, matches, squares, pool) -> relax.Expr:
    """The channel-window mean of ``squares``, or ``expr`` unchanged when the pool is another
    one."""
    call, x = matches[pool], matches[squares]
    attrs, shape = call.attrs, static_shape(x)
    spatial = len(_ints(attrs.pool_size))
    size, *rest = _ints(attrs.pool_size)
    padding = _ints(attrs.padding)  # front of each spatial axis, then back of each
    front, back = padding[0], padding[spatial]
    if (
        shape is None
        or len(shape) != spatial + 1  # the squares: batch, channels and the pool's other axes
        or rest != [1] * (spatial - 1)
        or _ints(attrs.strides) != [1] * spatial
        or _ints(attrs.dilation) != [1] * spatial
        or padding[1:spatial] + padding[spatial + 1 :] != [0] * (2 * spatial - 2)
        or not bool(attrs.count_include_pad)
        or bool(attrs.ceil_mode)
        or str(attrs.layout) != str(attrs.out_layout)
        or str(attrs.layout)[:2] != "NC"
        or front + back != size - 1  # the window keeps the channel count
    ):
        return expr
    channels, dtype = shape[1], str(x.ty.dtype)
    padded = relax.op.nn.pad(x, [0, 0, front, back] + [0, 0] * (len(shape) - 2))
    slices = [
        relax.op.strided_slice(padded, axes=[1], begin=[i], end=[i + channels]) for i in range(size)
    ]
    return relax.op.multiply(functools.reduce(relax.op.add, slices), relax.const(1.0 / size, dtype))


@never_failing
@relax.transform.function_pass(opt_level=0, name="ChannelWindowAsSlices")
def channel_window_as_slices(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite ``squeeze(avg_pool(expand_dims(x, 1), (size, 1[, 1])), 1)``, LRN's mean over a window
    of channels, into the sum of ``size`` shifted slices of ``x`` padded along its channels."""

    def rewrite(expr, matches, squares, expanded, pool):
        if (
            _ints(matches[expanded].attrs.axis) != [1]
            or expr.attrs.axis is None
            or _ints(expr.attrs.axis) != [1]
        ):
            return expr
        return _window_mean(expr, matches, squares, pool)

    for pool_op in _POOLS:
        squares = wildcard()
        expanded = is_op("relax.expand_dims")(squares)
        pool = is_op(pool_op)(expanded)
        window = functools.partial(rewrite, squares=squares, expanded=expanded, pool=pool)
        func = rewrite_calls(is_op("relax.squeeze")(pool), window, func)
    return func
