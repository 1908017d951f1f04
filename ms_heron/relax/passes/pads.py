"""Relax rewrite: a zero ``Pad`` node in front of a convolution folded into the convolution's
padding.

TensorFlow's converters (for ``SAME`` padding) and older ones write the padding as a node of its
own. That node copies the whole tensor, one more pass over memory per layer, and in a channels-last
model it stands between two transposes (``nn.pad`` has no layout rule): a VGG ran three kernels per
convolution. A convolution pads with zeros itself, so a constant-zero pad of only the image's axes
is the same convolution with wider padding, what ONNX Runtime's ``PadFusion`` does.
"""

from __future__ import annotations

from tvm import IRModule, relax
from tvm.relax.dpl import is_op, wildcard

from .guard import never_failing
from .sinking import rewrite_calls


def _widened(expr, matches, data, padded) -> relax.Expr:
    """The convolution reading ``data`` with the pad's widths added to its own, when that is
    exact."""
    pad, conv = matches[padded], expr
    layout = str(conv.attrs.data_layout)
    widths = [int(w) for w in pad.attrs.pad_width]  # before and after of each axis
    if (
        str(pad.attrs.pad_mode) != "constant"
        or float(pad.attrs.pad_value) != 0.0
        or sorted(layout) != sorted("NCHW")
        or len(widths) != 8
        or min(widths) < 0
    ):
        return expr
    by_axis = {axis: widths[2 * i : 2 * i + 2] for i, axis in enumerate(layout)}
    if by_axis["N"] != [0, 0] or by_axis["C"] != [0, 0]:
        return expr
    top, left, bottom, right = (int(p) for p in conv.attrs.padding)
    padding = [
        top + by_axis["H"][0],
        left + by_axis["W"][0],
        bottom + by_axis["H"][1],
        right + by_axis["W"][1],
    ]
    return relax.op.nn.conv2d(
        matches[data],
        conv.args[1],
        strides=conv.attrs.strides,
        padding=padding,
        dilation=conv.attrs.dilation,
        groups=int(conv.attrs.groups),
        data_layout=layout,
        kernel_layout=str(conv.attrs.kernel_layout),
        out_layout=str(conv.attrs.out_layout),
        out_dtype=conv.attrs.out_dtype,
    )


@never_failing
@relax.transform.function_pass(opt_level=0, name="FoldExplicitPads")
def fold_explicit_pads(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Rewrite ``conv2d(nn.pad(x, widths, value=0), w)`` padding only the image's axes into
    ``conv2d(x, w)`` with the widths added to its padding."""
    data = wildcard()
    padded = is_op("relax.nn.pad")(data)
    return rewrite_calls(
        is_op("relax.nn.conv2d")(padded, wildcard()),
        lambda e, m: _widened(e, m, data, padded),
        func,
    )
