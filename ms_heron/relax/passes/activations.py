"""Relax rewrite: activations written out with ``exp``, ``erf`` or ``tanh``, so that fast math
reaches them.

ONNX's ``Gelu`` (opset 20, what ``torch.onnx`` writes for ViT, BERT and Whisper) imports as
``nn.gelu`` or ``nn.gelu_tanh``, and ``Sigmoid`` (SiLU's in EfficientNet and LLaMA) as
``sigmoid``. Relax and LLVM lower them to exact ``erf``, ``tanh`` and ``exp`` only after
``FastMathTransform`` has run, and that pass rewrites ``erf``, ``tanh`` and ``exp`` ops, not the
ops built on them. The exact ones are scalar libm calls on the CPU, inside the kernel's epilogue,
whose time depends on the data. Written out as their formulas, the activations get the
vectorizable approximations the lowering gives every other ``exp``, ``erf`` and ``tanh``.
"""

from __future__ import annotations

import math

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, wildcard

from .guard import never_failing
from .sinking import rewrite_calls


def _formula(op: str, x: relax.Expr) -> relax.Expr:
    dtype = str(x.ty.dtype)

    def c(value: float) -> relax.Expr:
        return relax.const(value, dtype)

    if op in ("relax.sigmoid", "relax.nn.silu"):  # 1 / (1 + exp(-x)), and x times that
        one_plus = relax.op.add(c(1.0), relax.op.exp(relax.op.negative(x)))
        return relax.op.divide(c(1.0) if op == "relax.sigmoid" else x, one_plus)
    if op == "relax.nn.gelu":  # x * (1/2 + erf(x / sqrt(2)) / 2)
        erf = relax.op.erf(relax.op.multiply(x, c(math.sqrt(0.5))))
        return relax.op.multiply(x, relax.op.add(c(0.5), relax.op.multiply(erf, c(0.5))))
    # gelu_tanh: x / 2 * (1 + tanh(sqrt(2 / pi) * x * (1 + 0.044715 * x * x)))
    cubic = relax.op.add(c(1.0), relax.op.multiply(c(0.044715), relax.op.multiply(x, x)))
    inner = relax.op.multiply(relax.op.multiply(c(math.sqrt(2 / math.pi)), x), cubic)
    return relax.op.multiply(
        relax.op.multiply(c(0.5), x), relax.op.add(c(1.0), relax.op.tanh(inner))
    )


#: The activations written out.
_ACTIVATIONS = ("relax.sigmoid", "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh")


@never_failing
@relax.transform.function_pass(opt_level=0, name="ActivationsAsFormulas")
def activations_as_formulas(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """``sigmoid``, ``nn.silu``, ``nn.gelu`` and ``nn.gelu_tanh`` on float32 or float64 tensors as
    their ``exp``, ``erf`` and ``tanh`` formulas (half precision keeps Relax's own, which computes
    in float32)."""
    x = wildcard()
    for op in _ACTIVATIONS:

        def written_out(expr, matches, op=op):
            if str(getattr(expr.ty, "dtype", "")) not in ("float32", "float64"):
                return expr
            return _formula(op, matches[x])

        func = rewrite_calls(is_op(op)(x), written_out, func)
    return func
