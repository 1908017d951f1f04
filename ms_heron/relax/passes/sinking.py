"""Moving a layout change (a view, a transpose) past the element-wise ops that follow it.

Relax's FuseOps fuses element-wise ops into the kernel that produces their input -- a matmul's or a
convolution's epilogue -- only when nothing else stands between them. A view or a transpose right
after the kernel does, and the epilogue (bias, activation, rescale, quantize) then runs as a
separate pass over the whole tensor. Moving the layout change past those ops, one op at a time, puts
the epilogue back next to its kernel; the change itself is applied to the final result (free for a
view, one pass for a transpose, which a following layout change may then cancel). Its user today is
:mod:`.quantized` (the int8 convolutions' transposes); float convolutions need none, as
``ConvertLayout`` carries their channels-last layout itself (:mod:`.channels_last`).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import tvm
import tvm_ffi
from tvm import IRModule, relax
from tvm.relax.dpl import DFPattern, is_op, rewrite_call, wildcard

#: Element-wise Relax ops with one tensor operand (any other operand a scalar: clip's bounds,
#: (de)quantize's scale and zero point).
UNARY = (
    "relax.nn.relu",
    "relax.sigmoid",
    "relax.tanh",
    "relax.clip",
    "relax.astype",
    "relax.exp",
    "relax.erf",
    "relax.nn.gelu",
    "relax.nn.silu",
    "relax.negative",
    "relax.sqrt",
    "relax.quantize",
    "relax.dequantize",
)
#: Element-wise Relax ops on two broadcasting operands.
BINARY = (
    "relax.add",
    "relax.subtract",
    "relax.multiply",
    "relax.divide",
    "relax.maximum",
    "relax.minimum",
)
#: 2-D poolings, which keep the channels where their layout puts them.
POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")
#: Reductions over the axes their attribute names.
REDUCTIONS = ("relax.mean", "relax.max", "relax.min", "relax.sum")


_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def tir_calls(mod: IRModule) -> list[tuple[tvm.ir.GlobalVar, list[relax.Expr]]]:
    """Every ``call_tir`` in ``mod``'s Relax functions: its callee and its arguments."""
    calls = []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR):
            args = expr.args[1]
            calls.append(
                (expr.args[0], list(args.fields) if isinstance(args, relax.Tuple) else [args])
            )

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return calls


def constant_value(expr) -> np.ndarray | None:
    """The value of a constant tensor, or None when ``expr`` is not one (TVM's ``Constant`` also
    covers a literal integer, such as the bounds ``clip`` takes as arguments)."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.GenericConst) else None


def static_shape(expr) -> list[int] | None:
    """The tensor's shape, or None when it is not a tensor of static shape."""
    dims = getattr(getattr(expr.ty, "shape", None), "values", None)
    try:
        return None if dims is None else [int(d) for d in dims]
    except TypeError:  # a symbolic dimension
        return None


@dataclass(frozen=True)
class LayoutChange:
    """One kind of layout change and how to move it past an element-wise op.

    ``pattern(inner)`` matches the change applied to ``inner``. ``reapply(result, change)`` applies
    the matched ``change`` to the moved op's ``result`` (None: do not move). ``operand(other,
    change)`` gives a binary op's other operand in the layout before the change (None: do not move).
    """

    pattern: Callable[[DFPattern], DFPattern]
    reapply: Callable[[relax.Expr, relax.Call], relax.Expr | None]
    operand: Callable[[relax.Expr, relax.Call], relax.Expr | None]


def scalar_operands(expr: relax.Call) -> bool:
    """Whether every operand of ``expr`` after its first is a scalar (a unary op's parameters)."""
    shapes = [static_shape(a) for a in expr.args[1:]]
    return all(s is None or math.prod(s) == 1 for s in shapes)


def _rules(change: LayoutChange) -> list:
    """(pattern, rewriter) pairs moving ``change`` past one element-wise op."""
    rules = []

    def moved(expr, changed: relax.Call, args: list) -> relax.Expr:
        if static_shape(expr) is None or static_shape(expr) != static_shape(changed):
            return expr  # the op broadcasts the changed tensor up: its layout is not the change's
        result = change.reapply(relax.Call(expr.op, args, expr.attrs), changed)
        return expr if result is None else result

    for op in UNARY:
        inner = wildcard()
        changed = change.pattern(inner)

        def unary(expr, matches, inner=inner, changed=changed):
            if not scalar_operands(expr):
                return expr
            return moved(expr, matches[changed], [matches[inner], *expr.args[1:]])

        rules.append((is_op(op)(changed, varg_default_wildcard=True), unary))
    for op in BINARY:
        for side in (0, 1):
            inner, other = wildcard(), wildcard()
            changed = change.pattern(inner)

            def binary(expr, matches, inner=inner, other=other, changed=changed, side=side):
                operand = change.operand(matches[other], matches[changed])
                if operand is None:
                    return expr
                args = [matches[inner], operand] if side == 0 else [operand, matches[inner]]
                return moved(expr, matches[changed], args)

            rules.append(
                (is_op(op)(changed, other) if side == 0 else is_op(op)(other, changed), binary)
            )
    return rules


def sink(func: relax.Function, change: LayoutChange, extra_rules: list = ()) -> relax.Function:
    """Move every ``change`` in ``func`` as far past element-wise ops as it goes (with
    ``extra_rules``, more (pattern, rewriter) pairs applied in the same rounds)."""
    # each round moves the changes one op further
    return rewrite_until_fixed(func, [*_rules(change), *extra_rules])


def rewrite_calls(pattern: DFPattern, rewriter: Callable, func: relax.Function) -> relax.Function:
    """Relax's ``rewrite_call``, whose ``rewriter`` never sees a variable: after leaving a match
    unchanged, Relax hands it each variable bound to that match too (``gv = lv``), which has no
    arguments or attributes to read."""

    def matches_only(expr, matches):
        return expr if isinstance(expr, relax.Var) else rewriter(expr, matches)

    return rewrite_call(pattern, matches_only, func)


def rewrite_until_fixed(
    func: relax.Function, rules: list | Callable[[relax.Function], list]
) -> relax.Function:
    """Apply every (pattern, rewriter) pair of ``rules`` in turn, in rounds, until a round changes
    nothing; ``rules`` may be made anew for each round from the function the round starts with."""
    while True:
        before = func
        for pattern, rewriter in rules(func) if callable(rules) else rules:
            func = rewrite_calls(pattern, rewriter, func)
        if tvm_ffi.structural_equal(before, func):
            return func


def values_used_once(func: relax.Function) -> set:
    """The bound values (as a rewriter's matches hold them) that one binding, or the return, reads:
    a rewrite may change those in place, where changing a shared one would compute it twice."""
    uses = collections.Counter(relax.analysis.free_vars(func.body.body))
    for block in func.body.blocks:
        for binding in block.bindings:
            uses.update(relax.analysis.free_vars(binding.value))
    return {value for var, value in relax.analysis.get_var2val(func).items() if uses[var] == 1}
