"""Relax rewrite: a pooling whose one window covers its whole input, as the reduction it is.

Exporters write global pooling as a window as large as the input, or larger. Hugging Face's
EfficientNet pools its last 7 x 7 map with ``AvgPool2d(1280, ceil_mode=True)``: its channel count as
the kernel size. ONNX Runtime clips the window to the input. TVM's legalization pads the input to
the window instead (a 1286 x 1286 x 1280 buffer, 8.5 GB for 250 KB of data) and sums 1280 x 1280
terms per channel: its candidates timed out at 30 s in tuning. Where the output is one pixel whose
window holds the whole input, the pooling is a mean (or max) over the image's axes, what ONNX
Runtime computes, and what ONNX's ``GlobalAveragePool`` imports as.
"""

from __future__ import annotations

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, wildcard

from .guard import never_failing
from .sinking import rewrite_calls, static_shape


def _covers_input(pool) -> list[int] | None:
    """The image axes of ``pool`` if its output is one pixel whose window holds the whole input,
    and the result is the plain mean (or max) of it."""
    layout = str(pool.attrs.layout)
    shape, out = static_shape(pool.args[0]), static_shape(pool)
    if (
        shape is None
        or out is None
        or sorted(layout) != sorted("NCHW")
        or str(pool.attrs.out_layout) != layout
    ):
        return None
    axes = [layout.index("H"), layout.index("W")]
    before = [int(p) for p in pool.attrs.padding[:2]]
    if any(int(d) != 1 for d in pool.attrs.dilation) or any(out[a] != 1 for a in axes):
        return None
    if any(int(k) - b < shape[a] for k, b, a in zip(pool.attrs.pool_size, before, axes)):
        return None  # the window starts too far into the padding to reach the input's end
    if pool.op.name == "relax.nn.avg_pool2d" and any(
        before + [int(p) for p in pool.attrs.padding[2:]]
    ):
        if bool(pool.attrs.count_include_pad):
            return None  # the divisor counts padding: not the mean
    return axes


def _as_reduction(expr, _matches) -> relax.Expr:
    axes = _covers_input(expr)
    if axes is None or not str(expr.ty.dtype).startswith("float"):
        return expr
    reduce = relax.op.mean if expr.op.name == "relax.nn.avg_pool2d" else relax.op.max
    return reduce(expr.args[0], axis=axes, keepdims=True)


@never_failing
@relax.transform.function_pass(opt_level=0, name="WholeWindowPoolsAsReductions")
def whole_window_pools_as_reductions(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite ``nn.avg_pool2d`` / ``nn.max_pool2d`` with a one-pixel output whose window holds
    the whole input (and, averaging, whose divisor counts no padding) into ``mean`` / ``max`` over
    the image's axes."""
    x = wildcard()
    for op in ("relax.nn.avg_pool2d", "relax.nn.max_pool2d"):
        func = rewrite_calls(is_op(op)(x), _as_reduction, func)
    return func
