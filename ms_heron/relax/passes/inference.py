"""Relax rewrite: the ops that do nothing at inference, removed as ONNX Runtime's basic level does.

Exporters keep training-time ops in inference graphs. Classic CNNs (AlexNet, VGG, GoogLeNet,
SqueezeNet) hold a ``Dropout``, which TVM's ONNX importer turns into ``nn.dropout``: a tuple of the
input and a mask. Nothing computes it at inference, yet a tuple-valued op with no layout rule stops
Relax's ``ConvertLayout`` with an InternalError, and its identity copy is a kernel of its own. Casts
to the dtype a tensor already has and reshapes to its own shape (converters write both) are views at
best and copies at worst. Each use is rewired to what the op passes through.
"""

from __future__ import annotations

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, is_tuple_get_item, wildcard

from .guard import never_failing
from .sinking import rewrite_calls, static_shape


def _same_tensor(expr, matches, source) -> relax.Expr:
    """``source`` in place of ``expr`` when the op left its dtype and static shape as they were."""
    x = matches[source]
    same_dtype = str(getattr(x.ty, "dtype", "")) == str(getattr(expr.ty, "dtype", "?"))
    shape = static_shape(x)
    return x if same_dtype and shape is not None and shape == static_shape(expr) else expr


@never_failing
@relax.transform.function_pass(opt_level=0, name="DropInferenceNoops")
def drop_inference_noops(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Remove ``nn.dropout`` (its output is the input, its mask all ones), casts to the same dtype
    and reshapes to the same shape."""
    x = wildcard()
    dropout = is_op("relax.nn.dropout")(x)
    func = rewrite_calls(is_tuple_get_item(dropout, 0), lambda _e, m: m[x], func)
    func = rewrite_calls(
        is_tuple_get_item(dropout, 1), lambda _e, m: relax.op.ones_like(m[x]), func
    )
    for op in (is_op("relax.astype")(x), is_op("relax.reshape")(x, wildcard())):
        func = rewrite_calls(op, lambda e, m: _same_tensor(e, m, x), func)
    return func
