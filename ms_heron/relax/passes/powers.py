"""Relax rewrite: a small whole power as products, as ONNX Runtime's ``Pow`` kernel computes it.

GPT-2's tanh GELU (and other exported activations) cube with ``Pow(x, 3)``. TVM lowers ``power``
to ``pow``, a scalar libm call on the CPU that stops the kernel around it from vectorizing: that
GELU ran at a tenth of its memory bound. ``x * x * x`` vectorizes and fuses like any product.
"""

from __future__ import annotations

from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, wildcard

from .guard import never_failing
from .sinking import constant_value, rewrite_calls, static_shape

#: The largest whole exponent written as products (x**4 is two multiplies).
_LARGEST = 4


def _as_products(expr: relax.Call, matches, base, exponent) -> relax.Expr:
    value = constant_value(matches[exponent])
    if value is None or value.size != 1 or value.dtype.kind != "f":
        return expr
    power = float(value.reshape(()))
    if power != int(power) or not 1 <= power <= _LARGEST:
        return expr
    x = matches[base]
    if static_shape(x) is None or static_shape(x) != static_shape(expr):
        return expr  # the exponent broadcasts x up
    square = relax.op.multiply(x, x)
    return {1: x, 2: square, 3: relax.op.multiply(square, x), 4: relax.op.multiply(square, square)}[
        int(power)
    ]


@never_failing
@relax.transform.function_pass(opt_level=0, name="SmallPowersAsProducts")
def small_powers_as_products(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """``power(x, c)`` for a constant whole ``c`` from 1 to 4 as products of ``x``."""
    base, exponent = wildcard(), is_const()
    return rewrite_calls(
        is_op("relax.power")(base, exponent),
        lambda expr, matches: _as_products(expr, matches, base, exponent),
        func,
    )
