"""An int8 convolution's input channels padded to whole dot-product steps once, in the graph, not
in its kernel on every run.

A dot product reduces 4 input channels per step (2 where it multiplies s16 pairs). A network's
first convolution reads 3 (RGB). The Tensorize rule can pad the block (``pad_einsum``), but a
convolution reads ``x[2h + kh, 2w + kw, c]``, not a bare index, so that pads an im2col copy of the
image, 49 times its size for a 7x7 window, on every run: ResNet-50's int8 stem ran at 27% of its
bound compiled for AVX2, twice as long as its fp32 stem. Padded here, the image gains a zero
channel (one byte per pixel, written by the kernel that quantizes it) and the weight a zero row:
the same sums, and a kernel that reads its input in place.
"""

from __future__ import annotations

import numpy as np
from tvm import IRModule, relax
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.target import Target

from ...hardware.dot_products import dot_products
from ...intrinsics import DOT_MAX_PADDING_WASTE
from .guard import never_failing
from .sinking import constant_value, rewrite_calls


@never_failing
@relax.transform.function_pass(opt_level=0, name="WholeDotProductChannels")
def whole_dot_product_channels(func: relax.Function, _mod: IRModule, _ctx) -> relax.Function:
    """Pad the input channels of every channels-last u8 x s8 -> s32 convolution with a constant
    weight to a multiple of the current target's deepest dot-product step, with zeros in the
    activation and the weight, unless that adds more than ``DOT_MAX_PADDING_WASTE`` of the work (a
    single channel stays as it is). Elsewhere (no dot product, a float or grouped convolution) it
    changes nothing."""
    target = Target.current(allow_none=True)
    dots = dot_products(target) if target is not None else []
    if not dots:
        return func
    depth = max(d.reduction for d in dots)

    def padded(expr, _matches):
        data, weight = expr.args
        values, attrs = constant_value(weight), expr.attrs
        layout, kernel = str(attrs.data_layout), str(attrs.kernel_layout)
        if (
            (str(data.ty.dtype), values.dtype, str(expr.ty.dtype)) != ("uint8", np.int8, "int32")
            or int(attrs.groups) != 1
            or not layout.endswith("C")
            or "I" not in kernel
        ):
            return expr
        channels = values.shape[kernel.index("I")]
        extra = -channels % depth
        if not extra or extra > DOT_MAX_PADDING_WASTE * channels:
            return expr
        widths = [0] * (2 * len(layout))
        widths[2 * layout.index("C") + 1] = extra
        zeros = [(0, extra if axis == "I" else 0) for axis in kernel]
        return relax.Call(
            expr.op,
            [relax.op.nn.pad(data, widths, pad_value=0.0), relax.const(np.pad(values, zeros))],
            attrs,
        )

    return rewrite_calls(is_op("relax.nn.conv2d")(wildcard(), is_const()), padded, func)
