"""Relax rewrite: floating-point convolutions channels-last (NHWC, weights HWIO), as ONNX Runtime
runs them.

In NCHW a convolution's contiguous axis is the image's width (a ResNet's 56, 28, 14 and 7 columns),
which fills no whole vector, and a stem's three input channels are the reduction's outer axis; the
tuned kernels vectorize the output channels instead and write every tile back transposed.
Channels-last puts the output channels (a multiple of the vector in any real network) on the
contiguous axis of the output and the input channels on that of the input, so a kernel's lanes load
and store whole rows. ResNet-50's stem ran 1.9x faster so, tuned with the same trials. Relax's
``ConvertLayout`` carries the layout through the element-wise ops, pooling and reductions between
convolutions, so a network pays two transposes in all (its input and its output); the weights are
constants, re-laid out at compile time. Quantized convolutions already run channels-last
(:mod:`.quantized`) and are left alone.

``ConvertLayout`` runs out of memory (``std::bad_alloc``) on a ``squeeze`` with a negative axis that
the layout reaches, as in Swin's pooled output (``torch.onnx`` writes ``Squeeze(axes=[-2])``), so
those axes are counted from the front first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import tvm
from tvm import IRModule, relax
from tvm.relax.dpl import is_op, wildcard

from .guard import failure_reason, never_failing, with_skipped
from .sinking import rewrite_calls

#: The layouts ``ConvertLayout`` gives a converted convolution: data, weight (and output, as data).
CHANNELS_LAST = ["NHWC", "HWIO"]


def _converts(call: relax.Call) -> bool:
    """A 2-D NCHW convolution whose operands are floating point."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d" or call.attrs.data_layout != "NCHW":
        return False
    return all(str(arg.ty.dtype).startswith(("float", "bfloat")) for arg in call.args)


def _convolutions(mod: IRModule) -> int:
    """How many convolutions :func:`_converts` in ``mod``'s Relax functions."""
    return sum(
        isinstance(binding.value, relax.Call) and _converts(binding.value)
        for func in mod.functions.values()
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr)
        for block in func.body.blocks
        for binding in block.bindings
    )


def _convert(mod: IRModule, chosen: Callable[[int], bool]) -> IRModule:
    """``ConvertLayout`` of the convolutions whose index (in binding order, the order in which
    ConvertLayout asks) is ``chosen``; every other op follows its inputs' layout."""
    index = itertools.count()

    def desired(call: relax.Call) -> dict[str, list[str]]:
        return {call.op.name: CHANNELS_LAST} if _converts(call) and chosen(next(index)) else {}

    return relax.transform.ConvertLayout({}, desired)(mod)


@relax.transform.function_pass(opt_level=0, name="SqueezeAxesFromTheFront")
def _squeeze_axes_from_the_front(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """``squeeze(x, axis=[-k])`` as ``squeeze(x, axis=[ndim - k])``: the same op, in the form
    ConvertLayout's squeeze rule handles."""
    x = wildcard()

    def counted(expr: relax.Call, matches) -> relax.Expr:
        axes, ndim = expr.attrs.axis, getattr(matches[x].ty, "ndim", -1)
        if axes is None or ndim < 0 or all(int(a) >= 0 for a in axes):
            return expr
        return relax.op.squeeze(matches[x], axis=[int(a) % ndim for a in axes])

    return rewrite_calls(is_op("relax.squeeze")(x), counted, func)


@tvm.transform.module_pass(opt_level=0, name="ChannelsLastConvolutions")
def _channels_last(mod: IRModule, _ctx) -> IRModule:
    """Every convolution at once; when ConvertLayout raises (an op after some convolution it cannot
    carry a layout through), each convolution in turn, keeping those it converts without raising."""
    try:
        return _convert(mod, lambda _: True)
    except Exception as err:  # pylint: disable=broad-exception-caught  # fall back to those it can convert
        reason = failure_reason(err)
    total, kept = _convolutions(mod), set()
    for index in range(total):
        try:
            _convert(mod, lambda i, trial=index: i in kept or i == trial)
        except Exception:  # pylint: disable=broad-exception-caught  # this one stays NCHW
            continue
        kept.add(index)
    converted = _convert(mod, kept.__contains__) if kept else mod
    line = (
        f"ChannelsLastConvolutions left {total - len(kept)} of {total} convolutions NCHW: {reason}"
    )
    return with_skipped(converted, line)


channels_last_convolutions = never_failing(
    tvm.transform.Sequential(
        [_squeeze_axes_from_the_front, _channels_last, relax.transform.FoldConstant()],
        name="ChannelsLastConvolutions",
    )
)
channels_last_convolutions.__doc__ = (
    "Run every floating-point NCHW convolution in NHWC (weights HWIO, folded); those ConvertLayout "
    "cannot carry a layout from stay NCHW, named in the module's skipped rewrites."
)
