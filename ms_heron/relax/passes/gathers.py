"""Relax rewrite: gathers whose indices are clamped, so that no input makes a kernel read out of
bounds.

TVM's ONNX importer writes ``Gather`` as ``take(mode="fast")``, after mapping negative indices to
positive ones: a kernel that trusts its indices. The tuner times every kernel on random arguments,
and a random int64 index is far out of range, so every candidate of an embedding lookup crashed
its runner (``Subprocess terminated``), the task stayed untuned and the model's estimate infinite.
A clamped gather (``mode="clip"``) reads the same rows for every index in range and costs two
compares per index; ONNX Runtime checks its indices too.
"""

from __future__ import annotations

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .guard import never_failing


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

    return rewrite_call(is_op("relax.take")(data, indices), clamped, func)
