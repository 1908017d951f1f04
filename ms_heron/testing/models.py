"""Real model architectures as ONNX graphs built in code (no downloads), with deterministic weights.

ONNX is the one definition both sides read: ms_heron imports it through Relax's ONNX frontend and
ONNX Runtime runs the very same bytes, so comparisons are on the same model.

* :func:`resnet50`, :func:`mobilenet_v2`, :func:`bert`: whole networks as exported from PyTorch
  (BatchNorms unfolded, ResNet's residual adds as ``Sum``, ReLU6 as ``Clip``), BERT-base's 12
  layers.
* :func:`bert_layer`: one BERT-base encoder layer (seq 128, hidden 768, 12 heads, FFN 3072); with
  ``int8=True`` its six dense layers are quantized the way ONNX Runtime's dynamic-range quantizer
  writes them (``QuantizeLinear`` to u8 with a zero point, ``MatMulInteger`` with s8 weights,
  rescale).
* :func:`resnet_bottleneck`: a ResNet-50 bottleneck block (1x1 -> 3x3 -> 1x1 convs with ReLUs and
  the identity shortcut; batch norms folded into the convs, as deployed models have them); with
  ``int8=True`` its convolutions are quantized the same way (``ConvInteger``).
* :func:`quantized_static`, :func:`quantized_dynamic`: a model quantized by ONNX Runtime's own
  tools, what a user brings: QDQ (``quantize_static``, for CNNs) or dynamic-range
  (``quantize_dynamic``).
* :func:`mlp`: a small two-layer perceptron for tests.
* :func:`cnn`: a small NCHW convolution and a dense classifier (fp32 weight layouts, for tests).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass

import numpy as np


@dataclass
class OnnxModel:
    """An ONNX model with the inputs it was built for (name -> array, deterministic)."""

    name: str
    proto: object  # onnx.ModelProto
    inputs: dict[str, np.ndarray]

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(v.shape) for k, v in self.inputs.items()}


def _onnx():
    try:
        import onnx  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise ImportError("the model zoo builds ONNX graphs: pip install 'ms_heron[onnx]'") from err
    return onnx


class _Graph:
    """A small ONNX graph builder: unique names, weights as initializers."""

    def __init__(self, seed: int):
        self.onnx = _onnx()
        self.nodes, self.inits, self.count = [], [], 0
        self.rng = np.random.default_rng(seed)

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, value: np.ndarray, prefix: str = "w") -> str:
        name = self.name(prefix)
        self.inits.append(self.onnx.numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def weight(self, *shape: int, fan_in: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)

    def model(
        self, name: str, inputs: dict[str, np.ndarray], output: str, out_shape, opset: int = 17
    ):
        helper, tp = self.onnx.helper, self.onnx.TensorProto
        graph = helper.make_graph(
            self.nodes,
            name,
            [
                helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                for k, v in inputs.items()
            ],
            [helper.make_tensor_value_info(output, tp.FLOAT, out_shape)],
            initializer=self.inits,
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        proto.ir_version = 8  # readable by older ONNX Runtime releases too
        self.onnx.checker.check_model(proto)
        return OnnxModel(name, proto, inputs)


def _dense(g: _Graph, x: str, k: int, n: int, int8: bool) -> str:
    """``x @ W + b``; int8: quantized (:func:`_integer_op`)."""
    w = g.weight(k, n, fan_in=k)
    b = g.const((0.1 * g.rng.standard_normal(n)).astype(np.float32), "bias")
    return g.op(
        "Add", _integer_op(g, "MatMulInteger", x, w) if int8 else g.op("MatMul", x, g.const(w)), b
    )


def _integer_op(g: _Graph, op_type: str, x: str, w: np.ndarray, **attrs) -> str:
    """``op_type`` (MatMulInteger, ConvInteger) on u8 activations (zero point 128) and s8 weights,
    rescaled to fp32: what ONNX Runtime's dynamic-range quantizer writes for MatMul and Conv."""
    x_scale, w_scale = 8.0 / 255, float(np.abs(w).max()) / 127
    zero = g.const(np.array(128, np.uint8), "zp")
    xq = g.op("QuantizeLinear", x, g.const(np.array(x_scale, np.float32), "scale"), zero)
    wq = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
    acc = g.op(op_type, xq, g.const(wq), zero, **attrs)
    return g.op(
        "Mul",
        g.op("Cast", acc, to=g.onnx.TensorProto.FLOAT),
        g.const(np.array(x_scale * w_scale, np.float32), "scale"),
    )


def _layer_norm(g: _Graph, x: str, n: int) -> str:
    return g.op(
        "LayerNormalization",
        x,
        g.const(np.ones(n, np.float32), "gamma"),
        g.const(np.zeros(n, np.float32), "beta"),
        axis=-1,
        epsilon=1e-12,
    )


def bert_layer(
    seq: int = 128,
    hidden: int = 768,
    heads: int = 12,
    ffn: int = 3072,
    int8: bool = False,
    seed: int = 0,
) -> OnnxModel:
    """One BERT encoder layer (post-norm, GELU via erf), batch 1."""
    return bert(layers=1, seq=seq, hidden=hidden, heads=heads, ffn=ffn, int8=int8, seed=seed)


def bert(
    layers: int = 12,
    seq: int = 128,
    hidden: int = 768,
    heads: int = 12,
    ffn: int = 3072,
    int8: bool = False,
    seed: int = 0,
) -> OnnxModel:
    """BERT's encoder (BERT-base by default: 12 layers), batch 1, on embeddings ``x`` [seq,
    hidden]."""
    g = _Graph(seed)
    out = "x"
    for _ in range(layers):
        out = _encoder_layer(g, out, seq, hidden, heads, ffn, int8)
    x_value = g.rng.standard_normal((seq, hidden)).astype(np.float32)
    kind = "bert_layer" if layers == 1 else f"bert_{layers}layers"
    name = f"{kind}_{'int8' if int8 else 'fp32'}_seq{seq}_h{hidden}"
    return g.model(name, {"x": x_value}, out, [seq, hidden])


def _encoder_layer(
    g: _Graph, x: str, seq: int, hidden: int, heads: int, ffn: int, int8: bool
) -> str:
    head = hidden // heads
    shape_heads = g.const(np.array([seq, heads, head], np.int64), "shape")
    shape_flat = g.const(np.array([seq, hidden], np.int64), "shape")

    def split_heads(t: str, perm: list[int]) -> str:
        return g.op("Transpose", g.op("Reshape", t, shape_heads), perm=perm)

    q = split_heads(_dense(g, x, hidden, hidden, int8), [1, 0, 2])  # [heads, seq, head]
    k = split_heads(_dense(g, x, hidden, hidden, int8), [1, 2, 0])  # [heads, head, seq]
    v = split_heads(_dense(g, x, hidden, hidden, int8), [1, 0, 2])
    scores = g.op(
        "Mul", g.op("MatMul", q, k), g.const(np.array(1 / math.sqrt(head), np.float32), "scale")
    )
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)  # [heads, seq, head]
    context = g.op("Reshape", g.op("Transpose", context, perm=[1, 0, 2]), shape_flat)
    attn = _layer_norm(g, g.op("Add", _dense(g, context, hidden, hidden, int8), x), hidden)
    up = _dense(g, attn, hidden, ffn, int8)
    half = g.const(np.array(0.5, np.float32), "half")
    one = g.const(np.array(1.0, np.float32), "one")
    erf = g.op("Erf", g.op("Mul", up, g.const(np.array(1 / math.sqrt(2), np.float32), "rsqrt2")))
    gelu = g.op("Mul", g.op("Mul", up, half), g.op("Add", erf, one))
    return _layer_norm(g, g.op("Add", _dense(g, gelu, ffn, hidden, int8), attn), hidden)


def _conv(g: _Graph, x: str, ci: int, co: int, k: int, relu: bool, int8: bool = False) -> str:
    w = g.weight(co, ci, k, k, fan_in=ci * k * k)
    bias = (0.1 * g.rng.standard_normal(co)).astype(np.float32)
    shape = dict(kernel_shape=[k, k], pads=[k // 2] * 4)
    if int8:
        y = g.op(
            "Add",
            _integer_op(g, "ConvInteger", x, w, **shape),
            g.const(bias.reshape(1, co, 1, 1), "bias"),
        )
    else:
        y = g.op("Conv", x, g.const(w), g.const(bias, "bias"), **shape)
    return g.op("Relu", y) if relu else y


def resnet_bottleneck(
    size: int = 56, channels: int = 256, width: int = 64, int8: bool = False, seed: int = 0
) -> OnnxModel:
    """ResNet-50's first-stage bottleneck (NCHW, batch 1): 1x1 reduce, 3x3, 1x1 expand, + identity;
    int8: each convolution quantized (:func:`_integer_op`), the shortcut and ReLUs in fp32."""
    g = _Graph(seed)
    y = _conv(g, "x", channels, width, 1, relu=True, int8=int8)
    y = _conv(g, y, width, width, 3, relu=True, int8=int8)
    y = _conv(g, y, width, channels, 1, relu=False, int8=int8)
    out = g.op("Relu", g.op("Add", y, "x"))
    x_value = g.rng.standard_normal((1, channels, size, size)).astype(np.float32)
    name = f"resnet_bottleneck_{'int8_' if int8 else ''}{channels}x{size}x{size}"
    return g.model(name, {"x": x_value}, out, [1, channels, size, size])


def _conv_bn(
    g: _Graph, x: str, ci: int, co: int, k: int, stride: int = 1, act: str = "", groups: int = 1
) -> str:
    """Conv (no bias) -> BatchNormalization -> ``act`` ("relu", "relu6" or none), as PyTorch exports
    a trained CNN: the BatchNorm's statistics are not 0 and 1, so folding them changes the
    weights."""
    w = g.weight(co, ci // groups, k, k, fan_in=ci // groups * k * k)
    y = g.op(
        "Conv",
        x,
        g.const(w),
        kernel_shape=[k, k],
        pads=[k // 2] * 4,
        strides=[stride] * 2,
        group=groups,
    )
    # scale, bias, mean, variance
    stats = [
        g.rng.uniform(0.5, 1.5, co),
        0.1 * g.rng.standard_normal(co),
        0.1 * g.rng.standard_normal(co),
        g.rng.uniform(0.5, 1.5, co),
    ]
    y = g.op(
        "BatchNormalization", y, *[g.const(v.astype(np.float32), "bn") for v in stats], epsilon=1e-5
    )
    if act == "relu":
        return g.op("Relu", y)
    if act == "relu6":
        return g.op(
            "Clip",
            y,
            g.const(np.array(0, np.float32), "min"),
            g.const(np.array(6, np.float32), "max"),
        )
    return y


def _classifier(g: _Graph, x: str, features: int, classes: int) -> str:
    """Global average pool, flatten, and a dense layer as ``Gemm`` with a transposed weight
    (PyTorch's export)."""
    flat = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    w = g.weight(classes, features, fan_in=features)
    return g.op(
        "Gemm",
        flat,
        g.const(w),
        g.const((0.1 * g.rng.standard_normal(classes)).astype(np.float32), "bias"),
        transB=1,
    )


def resnet50(
    size: int = 224,
    classes: int = 1000,
    width: int = 64,
    blocks: tuple[int, ...] = (3, 4, 6, 3),
    seed: int = 0,
) -> OnnxModel:
    """ResNet-50 v1.5 (batch 1, NCHW): 53 convolutions, each with its BatchNorm, the residual adds
    as ``Sum`` (as converters of Caffe2-era models write them) followed by ReLU, max and average
    pooling and the classifier. ``width`` and ``blocks`` shrink it for tests; ``blocks`` deepens it
    too (:data:`RESNET101_BLOCKS`)."""
    g = _Graph(seed)
    y = g.op(
        "MaxPool",
        _conv_bn(g, "x", 3, width, 7, stride=2, act="relu"),
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    channels = width
    for stage, count in enumerate(blocks):
        inner = width * 2**stage
        for block in range(count):
            stride = 2 if block == 0 and stage > 0 else 1
            shortcut = y if block else _conv_bn(g, y, channels, 4 * inner, 1, stride=stride)
            z = _conv_bn(g, y, channels, inner, 1, act="relu")
            z = _conv_bn(g, z, inner, inner, 3, stride=stride, act="relu")
            z = _conv_bn(g, z, inner, 4 * inner, 1)
            y = g.op("Relu", g.op("Sum", z, shortcut))
            channels = 4 * inner
    out = _classifier(g, y, channels, classes)
    x_value = g.rng.standard_normal((1, 3, size, size)).astype(np.float32)
    depth = 2 + 3 * sum(blocks)  # the stem, three convolutions per block, the classifier
    return g.model(
        f"resnet{depth}_{size}" if width == 64 else f"resnet_w{width}_{size}",
        {"x": x_value},
        out,
        [1, classes],
    )


#: ResNet-101's blocks per stage: ResNet-50's but for the third stage, 23 blocks instead of 6
#: (the same convolution shapes, called more often).
RESNET101_BLOCKS = (3, 4, 23, 3)

#: MobileNetV2's inverted residual stages: expansion, output channels, blocks, first stride.
MOBILENET_V2_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(
    size: int = 224,
    classes: int = 1000,
    stages=MOBILENET_V2_STAGES,
    last: int = 1280,
    seed: int = 0,
) -> OnnxModel:
    """MobileNetV2 (batch 1, NCHW): inverted residual blocks of a 1x1 expansion, a 3x3 depthwise
    convolution and a 1x1 projection, each with its BatchNorm, ReLU6 as ``Clip``, residual ``Add``
    where the shape stays. ``stages`` and ``last`` shrink it for tests."""
    g = _Graph(seed)
    y = _conv_bn(g, "x", 3, 32, 3, stride=2, act="relu6")
    channels = 32
    for expansion, out, count, first_stride in stages:
        for block in range(count):
            stride = first_stride if block == 0 else 1
            hidden = channels * expansion
            z = _conv_bn(g, y, channels, hidden, 1, act="relu6") if expansion != 1 else y
            z = _conv_bn(g, z, hidden, hidden, 3, stride=stride, act="relu6", groups=hidden)
            z = _conv_bn(g, z, hidden, out, 1)
            y = g.op("Add", y, z) if stride == 1 and channels == out else z
            channels = out
    y = _conv_bn(g, y, channels, last, 1, act="relu6")
    x_value = g.rng.standard_normal((1, 3, size, size)).astype(np.float32)
    return g.model(
        f"mobilenet_v2_{size}" if stages == MOBILENET_V2_STAGES else f"mobilenet_v2_small_{size}",
        {"x": x_value},
        _classifier(g, y, last, classes),
        [1, classes],
    )


def mlp(
    batch: int = 16,
    features: int = 64,
    hidden: int = 128,
    out: int = 32,
    int8: bool = False,
    seed: int = 0,
) -> OnnxModel:
    """Dense -> ReLU -> dense: the smallest model with two tuning tasks."""
    g = _Graph(seed)
    y = _dense(g, g.op("Relu", _dense(g, "x", features, hidden, int8)), hidden, out, int8)
    x_value = g.rng.standard_normal((batch, features)).astype(np.float32)
    return g.model(
        f"mlp_{'int8' if int8 else 'fp32'}_{batch}x{features}", {"x": x_value}, y, [batch, out]
    )


def cnn(
    size: int = 6, channels: int = 8, width: int = 16, classes: int = 32, seed: int = 0
) -> OnnxModel:
    """Conv 3x3 (NCHW) -> ReLU -> flatten -> dense: the smallest model with a convolution's and a
    dense layer's constant weights."""
    g = _Graph(seed)
    y = g.op("Flatten", _conv(g, "x", channels, width, 3, relu=True), axis=1)
    out = _dense(g, y, width * size * size, classes, int8=False)
    x_value = g.rng.standard_normal((1, channels, size, size)).astype(np.float32)
    return g.model(f"cnn_{channels}x{size}x{size}", {"x": x_value}, out, [1, classes])


def _quantized(model: OnnxModel, quantize, suffix: str) -> OnnxModel:
    """``model`` through ``quant_pre_process`` (shape inference, BatchNorms folded into the
    convolutions), then ``quantize(prepared_path, quantized_path)``: ONNX Runtime's quantization
    recipe, on files as its tools want them."""
    from onnxruntime.quantization import quant_pre_process  # pylint: disable=import-outside-toplevel

    onnx = _onnx()
    with tempfile.TemporaryDirectory() as tmp:
        source, prepared, quantized = (
            os.path.join(tmp, f"{n}.onnx") for n in ("model", "prepared", "quantized")
        )
        onnx.save(model.proto, source)
        quant_pre_process(source, prepared, skip_symbolic_shape=True)
        quantize(prepared, quantized)
        return OnnxModel(f"{model.name}_{suffix}", onnx.load(quantized), model.inputs)


def quantized_static(
    model: OnnxModel, calibration_samples: int = 4, seed: int = 0, *, reduce_range: bool = False
) -> OnnxModel:
    """``model`` quantized as ONNX Runtime's guide says for CNNs: ``quantize_static`` in QDQ format
    (u8 activations, s8 weights, per tensor), calibrated on ``calibration_samples`` random inputs
    shaped like ``model.inputs``; ``reduce_range``: 7-bit weights, as the guide suggests for CPUs
    without VNNI."""
    # pylint: disable-next=import-outside-toplevel
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(seed)

    class RandomInputs(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(
                [
                    {
                        name: rng.standard_normal(value.shape).astype(value.dtype)
                        for name, value in model.inputs.items()
                    }
                    for _ in range(calibration_samples)
                ]
            )

        def get_next(self):
            return next(self.batches, None)

    def quantize(prepared: str, quantized: str) -> None:
        quantize_static(
            prepared,
            quantized,
            RandomInputs(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
        )

    return _quantized(model, quantize, "qdq-7bit" if reduce_range else "qdq")


def quantized_dynamic(model: OnnxModel, *, reduce_range: bool = False) -> OnnxModel:
    """``model`` quantized as ONNX Runtime's guide says for transformers: ``quantize_dynamic`` (s8
    weights; activations quantized to u8 at run time by ``DynamicQuantizeLinear``);
    ``reduce_range``: 7-bit weights."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # pylint: disable=import-outside-toplevel

    def quantize(prepared: str, quantized: str) -> None:
        quantize_dynamic(
            prepared, quantized, weight_type=QuantType.QInt8, reduce_range=reduce_range
        )

    return _quantized(model, quantize, "dynamic-7bit" if reduce_range else "dynamic")


#: The model zoo by name, as the benchmarks and examples offer it (each builder's defaults: the real
#: model sizes): whole networks (ResNet-50 and -101, MobileNetV2, BERT-base's 12 layers and
#: BERT-large's 24 in fp32; ResNet-50 and BERT-base quantized by ONNX Runtime's tools, with 8-bit
#: weights and with the 7-bit ones of its ``reduce_range``, which its guide suggests for CPUs
#: without VNNI), and one BERT-base layer and one ResNet-50 bottleneck, fp32 and int8. For a warm
#: start from the smaller one's records: ResNet-101 has ResNet-50's convolution shapes, its third
#: stage called more often, so its tasks are ResNet-50's with other weights; BERT-large (hidden size
#: 1024, 16 heads of 64) shares no task with BERT-base, and its shapes lie near BERT-base's
#: (projected).
ZOO = {
    "resnet50": resnet50,
    "resnet101": lambda: resnet50(blocks=RESNET101_BLOCKS),
    "mobilenetv2": mobilenet_v2,
    "bert-base": bert,
    "bert-large": lambda: bert(layers=24, hidden=1024, heads=16, ffn=4096),
    "resnet50-int8": lambda: quantized_static(resnet50()),
    "bert-base-int8": lambda: quantized_dynamic(bert()),
    "resnet50-int8-7bit": lambda: quantized_static(resnet50(), reduce_range=True),
    "bert-base-int8-7bit": lambda: quantized_dynamic(bert(), reduce_range=True),
    "bert": bert_layer,
    "bert-int8": lambda: bert_layer(int8=True),
    "resnet": resnet_bottleneck,
    "resnet-int8": lambda: resnet_bottleneck(int8=True),
}
