"""Lowered-module rewrite: each kernel's activations before its constant weights in its parameters.

Model tasks are timed with every argument but the first flushed from the caches
(:func:`ms_heron.tuning.measure.evaluator_config`): in a model the first argument, the activation, was
just written by the kernel before, while the weights come from memory. Fused kernels take their
arguments in the order their ops name them, so a matmul written ``W @ x`` (a 1x1 convolution over
pixels) takes its constant weight first: it would be timed with the weight warm
and the activation cold, a case the model never runs, and the search would choose for that case.
This pass moves every constant argument of a ``call_tir`` after the others, in the TIR function and
at the call alike (run after ``FuseTIR``, before tasks are extracted).
"""

from __future__ import annotations

import tvm
from tvm import IRModule, relax, tirx

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _order(args) -> list[int]:
    """Argument indices, the non-constant ones first (stable)."""
    constant = [isinstance(a, tvm.ir.expr.Constant) for a in args]
    return [i for i, c in enumerate(constant) if not c] + [i for i, c in enumerate(constant) if c]


def _calls(mod: IRModule) -> dict[tvm.ir.GlobalVar, list[relax.Call]]:
    """Every ``call_tir`` of the module's Relax functions, by the TIR function it calls."""
    found: dict[tvm.ir.GlobalVar, list[relax.Call]] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR) and isinstance(expr.args[1], relax.Tuple):
            found.setdefault(expr.args[0], []).append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


@relax.expr_functor.mutator
class _Reorder(relax.PyExprMutator):
    def __init__(self, mod: IRModule, orders: dict):
        super().__init__(mod)
        self.orders = orders

    def visit_call_(self, call):  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        order = self.orders.get(call.args[0]) if call.op.same_as(_CALL_TIR) else None
        if order is None:
            return call
        args = relax.Tuple([call.args[1].fields[i] for i in order])
        return relax.Call(call.op, [call.args[0], args, *call.args[2:]], call.attrs, call.ty_args)


@tvm.transform.module_pass(opt_level=0, name="ActivationsFirst")
def activations_first(mod: IRModule, _ctx) -> IRModule:
    """Put each kernel's constant arguments after its other inputs (see the module docstring)."""
    orders = {}
    for gv, calls in _calls(mod).items():
        wanted = {tuple(_order(c.args[1].fields)) for c in calls}
        order = next(iter(wanted))
        if len(wanted) == 1 and list(order) != sorted(order):  # one order for every call site
            orders[gv] = list(order)
    if not orders:
        return mod
    for gv, order in orders.items():
        func = mod[gv]
        params = [func.params[i] for i in order] + list(func.params[len(order) :])  # outputs stay last
        mod[gv] = tirx.PrimFunc(params, func.body, func.ret_type, func.attrs)
    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mod[gv] = _Reorder(mod, orders).visit_expr(func)
    return mod
