"""Relax graph rewrites ms_heron's lowering runs before tasks are extracted; each is a pass a user
can add to a stock Relax pipeline (weights bound as constants first, before ``LegalizeOps``). Each
leaves what it does not recognize as it was; one that fails leaves the whole module as it was and
says so (:mod:`.guard`).

* :func:`drop_inference_noops`: Dropout (and casts and reshapes that change nothing) removed;
* :func:`clamped_gathers`: ``Gather``'s indices clamped, so that no input (the tuner's random ones)
  makes an embedding lookup read out of bounds;
* :func:`channel_window_as_slices`: LRN's window over channels as slices that fuse into one kernel;
* :func:`activations_as_formulas`: GELU and sigmoid (SiLU) written out with ``erf``, ``tanh`` and
  ``exp``, which the lowering's fast math then approximates (Relax and LLVM lower them to libm
  calls after it);
* :func:`small_powers_as_products`: ``Pow(x, 3)`` (GPT-2's GELU) as ``x * x * x``, which
  vectorizes, instead of a libm call per element;
* :func:`views_after_epilogues`: the reshape after a flattened matmul (``torch.nn.Linear`` on 3-D
  input) moved past its bias, activation and residual add, which then fuse into its kernel;
* :func:`fold_explicit_pads`: a zero ``Pad`` node in front of a convolution into its padding;
* :func:`whole_window_pools_as_reductions`: a pooling whose one window holds its whole input (an
  exporter's global pooling) as a mean or max over the image's axes;
* :func:`fold_scale_shift`: inference BatchNorm and constant per-channel scales and shifts folded
  into the convolution's or matmul's weight and bias;
* :func:`chain_stacked_reductions`: ONNX's n-ary ``Sum``/``Mean``/``Max``/``Min`` as chained binary
  ops instead of a stack and a reduction, so residual adds fuse into the kernel before them;
* :func:`channels_last_convolutions`: floating-point convolutions in NHWC, vector lanes along
  channels;
* :func:`winograd_convolutions`: their 3x3 stride-1 convolutions as Winograd F(2x2, 3x3) or
  F(4x4, 3x3), a batched GEMM between two transforms, 2.25x or 4x fewer multiply-adds
  (:func:`winograd_rewrite` weighs the two forms at a given balance);
* :func:`integer_qdq`, :func:`keep_int8_matmuls`, :func:`channels_last_epilogues`: quantized matmuls
  and convolutions (QDQ, ``MatMulInteger``, ``ConvInteger``) in the u8 x s8 form the CPU's dot
  product executes, their epilogues fused;
* :func:`quantization_round_trips`: a quantize that only its dequantize reads (before a
  residual add) rounded and clipped in float, without the conversion to bytes and back; a dequantize
  quantized again alike dropped; a max pool between them run on the bytes;
* :func:`quantization_parameters_as_tensors`: quantized layers of one shape are one tuning task;
* :func:`whole_dot_product_channels`: an int8 convolution's input channels (an image's 3) padded
  to whole dot-product steps, once, instead of by an im2col copy in its kernel;
* :func:`s16_weights`: on a CPU without VNNI, s8 weights stored widened to s16, as its exact dot
  product multiplies them, unless they are narrow, as they are or with their reduction paired anew
  (the activation's channels taken in that order);
* :func:`shared_channel_orders` (before :func:`s16_weights`): one such order for a tensor several
  convolutions or matmuls read (a residual stream), computed in it from the kernels that write it,
  so that none takes a copy; where no order passes (a LayerNorm), its readers share one copy;
* :func:`channel_orders_into_producers`: such an order applied to the weight of the kernel that
  produces the activation, instead of a copy; :func:`gathers_as_injective` lets the copies that
  stay fuse with the element-wise ops before them;
* :func:`record_narrow_weights` (after fusion): which s8 weights are narrow enough for the byte
  multiply of CPUs without VNNI.
"""

from .activations import activations_as_formulas
from .channel_orders import channel_orders_into_producers
from .channels_last import channels_last_convolutions
from .fold_scale_shift import fold_scale_shift
from .gathers import clamped_gathers, gathers_as_injective
from .guard import SKIPPED_PASSES_ATTR, failure_reason, never_failing, skipped_passes
from .inference import drop_inference_noops
from .input_channels import whole_dot_product_channels
from .lrn import channel_window_as_slices
from .narrow_weights import record_narrow_weights, s16_weights
from .nary import chain_stacked_reductions
from .pads import fold_explicit_pads
from .pooling import whole_window_pools_as_reductions
from .powers import small_powers_as_products
from .quantized import (
    channels_last_epilogues,
    integer_qdq,
    keep_int8_matmuls,
    quantization_parameters_as_tensors,
)
from .round_trips import quantization_round_trips
from .stream_orders import shared_channel_orders
from .views import views_after_epilogues
from .winograd import winograd_convolutions, winograd_rewrite

__all__ = [
    "SKIPPED_PASSES_ATTR",
    "activations_as_formulas",
    "chain_stacked_reductions",
    "channel_orders_into_producers",
    "clamped_gathers",
    "channel_window_as_slices",
    "channels_last_convolutions",
    "channels_last_epilogues",
    "drop_inference_noops",
    "failure_reason",
    "fold_explicit_pads",
    "fold_scale_shift",
    "gathers_as_injective",
    "integer_qdq",
    "keep_int8_matmuls",
    "never_failing",
    "quantization_parameters_as_tensors",
    "quantization_round_trips",
    "record_narrow_weights",
    "s16_weights",
    "shared_channel_orders",
    "skipped_passes",
    "small_powers_as_products",
    "views_after_epilogues",
    "whole_dot_product_channels",
    "whole_window_pools_as_reductions",
    "winograd_convolutions",
    "winograd_rewrite",
]
