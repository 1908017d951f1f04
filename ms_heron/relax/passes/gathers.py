"""Gathers: their indices clamped, so that no input makes a kernel read out of bounds, and those at
constant indices marked injective, so that they fuse.

TVM's ONNX importer writes ``Gather`` as ``take(mode="fast")``, after mapping negative indices to
positive ones: a kernel that trusts its indices. The tuner times every kernel on random arguments,
and a random int64 index is far out of range, so every candidate of an embedding lookup crashed
its runner (``Subprocess terminated``), the task stayed untuned and the model's estimate infinite.
A clamped gather (``mode="clip"``) reads the same rows for every index in range and costs two
compares per index; ONNX Runtime checks its indices too.
"""

from __future__ import annotations

import tvm
from tvm import IRModule, relax
from tvm.ir.expr import TensorLoad as BufferLoad
from tvm.relax.dpl import is_op, wildcard
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import ScheduleError
from tvm.tirx.expr import Cast, IntImm, Max, Min

from ...schedule.analysis import param_index
from .guard import never_failing
from .sinking import constant_value, rewrite_calls, tir_calls


@never_failing
@relax.transform.function_pass(opt_level=0, name="ClampedGathers")
def clamped_gathers(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite ``take(x, indices, mode="fast")`` as ``take(x, indices, mode="clip")``."""
    data, indices = wildcard(), wildcard()

    def clamped(expr: relax.Call, matches) -> relax.Expr:
        if str(expr.attrs.mode) != "fast":
            return expr
        axis = expr.attrs.axis
        return relax.op.take(
            matches[data], matches[indices], axis=None if axis is None else int(axis), mode="clip"
        )

    return rewrite_calls(is_op("relax.take")(data, indices), clamped, func)


#: Relax's op pattern of an injective op (``AnnotateTIROpPattern``'s ``op_pattern``).
_INJECTIVE = 2


@never_failing
@tvm.transform.module_pass(opt_level=0, name="GathersAsInjective")
def gathers_as_injective(mod: IRModule, _ctx) -> IRModule:
    """Mark each TIR function that only gathers whole elements at constant indices (a channel
    order's ``take``) injective, as Relay registered ``take``; run between
    ``AnnotateTIROpPattern`` and ``FuseOps``.

    TVM's pattern analysis calls a load whose index is itself loaded opaque, so FuseOps would fuse
    nothing with a channel order's copy: a quantize before it would write the activation and the
    copy read it again. Injective, the two run as one pass. Gathers at run-time indices (an
    embedding lookup) stay as TVM marks them."""
    constant: dict[tvm.ir.GlobalVar, bool] = {}
    for callee, args in tir_calls(mod):
        func = mod[callee]
        index = _gathered_param(func) if isinstance(func, tvm.tirx.PrimFunc) else None
        at_constants = index is not None and constant_value(args[index]) is not None
        constant[callee] = constant.get(callee, True) and at_constants
    for gvar, at_constants in constant.items():
        if at_constants:
            mod[gvar] = mod[gvar].with_attr("op_pattern", _INJECTIVE)
    return mod


def _gathered_param(func: tvm.tirx.PrimFunc) -> int | None:
    """The parameter holding the indices, where ``func`` is one block storing
    ``data[..., indices[i], ...]`` at its own iterators (the index perhaps clamped into range:
    :func:`clamped_gathers`); else None."""
    sch = Schedule(func)
    try:
        (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    except (ScheduleError, ValueError):
        return None
    stmt = sch.get(block)
    store, load = stmt.body, getattr(stmt.body, "value", None)
    if not isinstance(store, tvm.tirx.BufferStore) or not isinstance(load, BufferLoad):
        return None
    own = [iv.var for iv in stmt.iter_vars]

    def bare(index) -> bool:
        return any(index.same_as(v) for v in own)

    def gathered(index):  # loaded at the block's own iterators, perhaps widened, clamped
        while not isinstance(index, BufferLoad):
            if isinstance(index, Cast):
                index = index.value
            elif isinstance(index, (Min, Max)) and isinstance(index.a, IntImm):
                index = index.b
            elif isinstance(index, (Min, Max)) and isinstance(index.b, IntImm):
                index = index.a
            else:
                return None
        return index if all(bare(i) for i in index.indices) else None

    loads = [gathered(i) for i in load.indices if not bare(i)]
    if not all(bare(i) for i in store.indices) or len(loads) != 1 or loads[0] is None:
        return None
    return param_index(sch, loads[0].source)
