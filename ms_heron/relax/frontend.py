"""ONNX models into Relax: TVM's ONNX frontend with the converters it lacks or writes unfusable.

* ``ConvInteger`` (what ONNX Runtime's dynamic quantizer writes for ``Conv``) has no converter in
  TVM's frontend; :func:`ms_heron.relax.passes.quantized.conv_integer` builds its u8 x s8 form.
* ``Clip`` with constant bounds (ReLU6) is imported by TVM as two already-lowered TIR calls, which
  nothing can move a layout change past and which FuseOps leaves out of the convolution before them;
  here it is ``relax.op.clip``, an element-wise op like ReLU.
* ``Pad`` in constant mode: TVM's converter writes an already-lowered TIR call, which no rewrite can
  read; here it is ``relax.op.nn.pad``, which :func:`~.passes.fold_explicit_pads` folds into the
  convolution after it (TensorFlow's and older converters put the padding in a node of its own).
* ``LRN`` with an even ``size``: TVM's converter centres the window on both sides by ``size // 2``,
  one channel too many, and the import fails on the shapes; here the window is the ONNX
  specification's, ``(size - 1) // 2`` channels before and the rest after (odd sizes as before).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Mapping

import numpy as np
import tvm
from tvm import IRModule, relax

from .lowering import ModelError, require_static_shapes
from .passes.guard import failure_reason
from .passes.quantized import conv_integer
from .passes.sinking import constant_value


def from_onnx(model, input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> IRModule:
    """Import an ONNX model (a ``ModelProto`` or a path) as a Relax module with static shapes.

    ``input_shapes`` fixes inputs whose shapes the model leaves symbolic (``{"x": (1, 128)}``).
    """
    try:
        import onnx  # pylint: disable=import-outside-toplevel
        from tvm.relax.frontend.onnx import from_onnx as relax_from_onnx  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise ModelError(
            "ONNX import needs the onnx package: pip install 'ms_heron[onnx]'"
        ) from err
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))
    inputs = {i.name: i for i in model.graph.input}
    unknown = sorted(set(input_shapes or {}) - set(inputs))
    if unknown:
        raise ModelError(
            f"--input-shape names {', '.join(unknown)}, but the model's inputs are "
            f"{', '.join(inputs)}"
        )
    dtypes = {
        name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name
        for name, i in inputs.items()
    }
    try:
        with _with_converters(onnx_converters()):
            mod = relax_from_onnx(model, shape_dict=dict(input_shapes or {}), dtype_dict=dtypes)
    except tvm.error.OpNotImplemented as err:
        raise ModelError(
            f"{err}. Relax cannot import these ONNX operators; replace them in the model "
            "(or export it with other operators) before tuning"
        ) from err
    except Exception as err:  # pylint: disable=broad-exception-caught  # TVM's importer: one line, not a trace
        raise ModelError(
            f"TVM's ONNX importer cannot import this model: {failure_reason(err)}; export it "
            "without that operator form (and check it with onnx.checker.check_model)"
        ) from err
    require_static_shapes(mod)
    return mod


@contextlib.contextmanager
def _with_converters(extra: Mapping[str, Any]):
    """TVM's ONNX frontend with ``extra`` converters added: it has no registry for them, so its
    converter table is wrapped for the duration of one import."""
    from tvm.relax.frontend.onnx import onnx_frontend  # pylint: disable=import-outside-toplevel

    original = onnx_frontend._get_convert_map  # pylint: disable=protected-access
    onnx_frontend._get_convert_map = lambda: {**original(), **extra}  # pylint: disable=protected-access
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original  # pylint: disable=protected-access


def onnx_converters() -> dict:
    """ONNX operator name -> Relax frontend converter for the operators above (needs the onnx
    package)."""
    # pylint: disable-next=import-outside-toplevel
    from tvm.relax.frontend.onnx.onnx_frontend import Clip as StockClip
    from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter
    from tvm.relax.frontend.onnx.onnx_frontend import Pad as StockPad

    class ConvInteger(OnnxOpConverter):
        """ONNX ConvInteger (opset 10): u8 x s8 with zero points -> s32."""

        @classmethod
        def _impl_v10(cls, _bb, inputs, attr, _params):
            return conv_integer(inputs, attr)

    class Clip(StockClip):
        """ONNX Clip (opset 11+, bounds as inputs) with constant scalar bounds ->
        ``relax.op.clip``."""

        @classmethod
        def _impl_v13(cls, bb, inputs, attr, params):
            bounds = [constant_value(b) if b is not None else None for b in inputs[1:3]]
            floating = str(inputs[0].ty.dtype).startswith("float")
            if not floating or any(
                b is not None and (b.size != 1 or np.isnan(b).any()) for b in bounds
            ):
                return super()._impl_v13(bb, inputs, attr, params)
            low, high = (
                float(b.reshape(())) if b is not None else default
                for b, default in zip(bounds, (-np.inf, np.inf))
            )
            return relax.op.clip(inputs[0], low, high)

        @classmethod
        def _impl_v11(cls, bb, inputs, attr, params):
            return cls._impl_v13(bb, inputs, attr, params)

    class Pad(StockPad):
        """ONNX Pad, constant mode with static pads -> ``relax.op.nn.pad`` (other modes as TVM has
        them)."""

        @staticmethod
        def _relax_pad(x, before, after, value):
            # before and after of each axis
            widths = [int(w) for pair in zip(before, after) for w in pair]
            return relax.op.nn.pad(x, widths, pad_value=float(value))

        @classmethod
        def _impl_v2(cls, bb, inputs, attr, params):
            if attr.get("mode", b"constant").decode("utf-8") != "constant":
                return super()._impl_v2(bb, inputs, attr, params)
            pads = list(attr["pads"])
            return cls._relax_pad(
                inputs[0], pads[: len(pads) // 2], pads[len(pads) // 2 :], attr.get("value", 0.0)
            )

        @classmethod
        def _lower_pad(cls, bb, inputs, attr, params, allowed_modes):
            if attr.get("mode", b"constant").decode("utf-8") != "constant":
                return super()._lower_pad(bb, inputs, attr, params, allowed_modes)
            return cls._relax_pad(inputs[0], *cls._parse_pads_and_axes(inputs, params))

    class LRN(OnnxOpConverter):
        """ONNX LRN (opset 1 and 13): the mean of squares over a window of channels, as an average
        pool over a new depth axis (which :func:`~.passes.channel_window_as_slices` rewrites)."""

        @classmethod
        def _impl_v1(cls, _bb, inputs, attr, _params):
            x, size = inputs[0], int(attr["size"])
            # the pool's axes: the channels, as depth, and the image's
            spatial = len(x.ty.shape) - 1
            if spatial not in (2, 3):
                raise ValueError(f"LRN needs a 3-D or 4-D input, got {spatial + 1}-D")
            before, after = (size - 1) // 2, size // 2
            pool = relax.op.nn.avg_pool3d if spatial == 3 else relax.op.nn.avg_pool2d
            mean = pool(
                relax.op.expand_dims(relax.op.multiply(x, x), axis=1),
                pool_size=(size,) + (1,) * (spatial - 1),
                strides=(1,) * spatial,
                padding=[before] + [0] * (spatial - 1) + [after] + [0] * (spatial - 1),
                layout="NCDHW" if spatial == 3 else "NCHW",
                count_include_pad=True,
            )
            dtype = str(x.ty.dtype)
            scaled = relax.op.multiply(
                relax.op.squeeze(mean, axis=[1]), relax.const(attr.get("alpha", 1e-4), dtype)
            )
            denominator = relax.op.power(
                relax.op.add(scaled, relax.const(attr.get("bias", 1.0), dtype)),
                relax.const(attr.get("beta", 0.75), dtype),
            )
            return relax.op.divide(x, denominator)

        @classmethod
        def _impl_v13(cls, bb, inputs, attr, params):
            return cls._impl_v1(bb, inputs, attr, params)

    return {"ConvInteger": ConvInteger, "Clip": Clip, "LRN": LRN, "Pad": Pad}
