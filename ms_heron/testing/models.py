"""Real model architectures as ONNX graphs built in code (no downloads), with deterministic weights.

ONNX is the one definition both sides read: ms_heron imports it through Relax's ONNX frontend and
ONNX Runtime runs the very same bytes, so comparisons are on the same model.

* :func:`bert_layer`: one BERT-base encoder layer (seq 128, hidden 768, 12 heads, FFN 3072); with
  ``int8=True`` its six dense layers are quantized the way ONNX Runtime's dynamic-range quantizer
  writes them (``QuantizeLinear`` to u8 with a zero point, ``MatMulInteger`` with s8 weights, rescale).
* :func:`resnet_bottleneck`: a ResNet-50 bottleneck block (1x1 -> 3x3 -> 1x1 convs with ReLUs and
  the identity shortcut; batch norms folded into the convs, as deployed models have them); with
  ``int8=True`` its convolutions are quantized the same way (``ConvInteger``).
* :func:`mlp`: a small two-layer perceptron for tests.
* :func:`cnn`: a small NCHW convolution and a dense classifier (fp32 weight layouts, for tests).
"""

from __future__ import annotations

import math
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

    def model(self, name: str, inputs: dict[str, np.ndarray], output: str, out_shape, opset: int = 17):
        helper, tp = self.onnx.helper, self.onnx.TensorProto
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
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
    return g.op("Add", _integer_op(g, "MatMulInteger", x, w) if int8 else g.op("MatMul", x, g.const(w)), b)


def _integer_op(g: _Graph, op_type: str, x: str, w: np.ndarray, **attrs) -> str:
    """``op_type`` (MatMulInteger, ConvInteger) on u8 activations (zero point 128) and s8 weights,
    rescaled to fp32: what ONNX Runtime's dynamic-range quantizer writes for MatMul and Conv."""
    x_scale, w_scale = 8.0 / 255, float(np.abs(w).max()) / 127
    zero = g.const(np.array(128, np.uint8), "zp")
    xq = g.op("QuantizeLinear", x, g.const(np.array(x_scale, np.float32), "scale"), zero)
    wq = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
    acc = g.op(op_type, xq, g.const(wq), zero, **attrs)
    return g.op("Mul", g.op("Cast", acc, to=g.onnx.TensorProto.FLOAT), g.const(np.array(x_scale * w_scale, np.float32), "scale"))


def _layer_norm(g: _Graph, x: str, n: int) -> str:
    return g.op("LayerNormalization", x, g.const(np.ones(n, np.float32), "gamma"), g.const(np.zeros(n, np.float32), "beta"), axis=-1, epsilon=1e-12)


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, int8: bool = False, seed: int = 0) -> OnnxModel:
    """One BERT encoder layer (post-norm, GELU via erf), batch 1."""
    g = _Graph(seed)
    head = hidden // heads
    shape_heads = g.const(np.array([seq, heads, head], np.int64), "shape")
    shape_flat = g.const(np.array([seq, hidden], np.int64), "shape")

    def split_heads(t: str, perm: list[int]) -> str:
        return g.op("Transpose", g.op("Reshape", t, shape_heads), perm=perm)

    x = "x"
    q = split_heads(_dense(g, x, hidden, hidden, int8), [1, 0, 2])  # [heads, seq, head]
    k = split_heads(_dense(g, x, hidden, hidden, int8), [1, 2, 0])  # [heads, head, seq]
    v = split_heads(_dense(g, x, hidden, hidden, int8), [1, 0, 2])
    scores = g.op("Mul", g.op("MatMul", q, k), g.const(np.array(1 / math.sqrt(head), np.float32), "scale"))
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)  # [heads, seq, head]
    context = g.op("Reshape", g.op("Transpose", context, perm=[1, 0, 2]), shape_flat)
    attn = _layer_norm(g, g.op("Add", _dense(g, context, hidden, hidden, int8), x), hidden)
    up = _dense(g, attn, hidden, ffn, int8)
    half = g.const(np.array(0.5, np.float32), "half")
    one = g.const(np.array(1.0, np.float32), "one")
    erf = g.op("Erf", g.op("Mul", up, g.const(np.array(1 / math.sqrt(2), np.float32), "rsqrt2")))
    gelu = g.op("Mul", g.op("Mul", up, half), g.op("Add", erf, one))
    out = _layer_norm(g, g.op("Add", _dense(g, gelu, ffn, hidden, int8), attn), hidden)
    x_value = g.rng.standard_normal((seq, hidden)).astype(np.float32)
    name = f"bert_layer_{'int8' if int8 else 'fp32'}_seq{seq}_h{hidden}"
    return g.model(name, {"x": x_value}, out, [seq, hidden])


def _conv(g: _Graph, x: str, ci: int, co: int, k: int, relu: bool, int8: bool = False) -> str:
    w = g.weight(co, ci, k, k, fan_in=ci * k * k)
    bias = (0.1 * g.rng.standard_normal(co)).astype(np.float32)
    shape = dict(kernel_shape=[k, k], pads=[k // 2] * 4)
    if int8:
        y = g.op("Add", _integer_op(g, "ConvInteger", x, w, **shape), g.const(bias.reshape(1, co, 1, 1), "bias"))
    else:
        y = g.op("Conv", x, g.const(w), g.const(bias, "bias"), **shape)
    return g.op("Relu", y) if relu else y


def resnet_bottleneck(size: int = 56, channels: int = 256, width: int = 64, int8: bool = False, seed: int = 0) -> OnnxModel:
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


def mlp(batch: int = 16, features: int = 64, hidden: int = 128, out: int = 32, int8: bool = False, seed: int = 0) -> OnnxModel:
    """Dense -> ReLU -> dense: the smallest model with two tuning tasks."""
    g = _Graph(seed)
    y = _dense(g, g.op("Relu", _dense(g, "x", features, hidden, int8)), hidden, out, int8)
    x_value = g.rng.standard_normal((batch, features)).astype(np.float32)
    return g.model(f"mlp_{'int8' if int8 else 'fp32'}_{batch}x{features}", {"x": x_value}, y, [batch, out])


def cnn(size: int = 6, channels: int = 8, width: int = 16, classes: int = 32, seed: int = 0) -> OnnxModel:
    """Conv 3x3 (NCHW) -> ReLU -> flatten -> dense: the smallest model with a convolution's and a
    dense layer's constant weights."""
    g = _Graph(seed)
    y = g.op("Flatten", _conv(g, "x", channels, width, 3, relu=True), axis=1)
    out = _dense(g, y, width * size * size, classes, int8=False)
    x_value = g.rng.standard_normal((1, channels, size, size)).astype(np.float32)
    return g.model(f"cnn_{channels}x{size}x{size}", {"x": x_value}, out, [1, classes])


#: The model zoo by name, as the benchmarks and examples offer it (each builder's defaults: the real
#: model sizes; BERT-base layer and ResNet-50 bottleneck, fp32 and int8).
ZOO = {
    "bert": bert_layer,
    "bert-int8": lambda: bert_layer(int8=True),
    "resnet": resnet_bottleneck,
    "resnet-int8": lambda: resnet_bottleneck(int8=True),
}
