"""The Caffe-era classic CNNs as older converters wrote them to ONNX, built in code (no downloads).

The ONNX model zoo's AlexNet, VGG, GoogLeNet and SqueezeNet came through Caffe and Caffe2
converters at opsets 7 to 9, and hold forms the PyTorch-style graphs of :mod:`.models` do not:
* inference ``Dropout`` nodes (a tuple of output and mask in Relax);
* ``LRN``;
* explicit ``Pad`` nodes in front of convolutions and pools (opset 2's ``pads`` attribute);
* ``Reshape`` to a constant shape instead of ``Flatten``, biased ``Conv`` and ``Gemm``, ``Softmax``
  at the end;
* ``Concat`` of convolution branches (GoogLeNet's inception, SqueezeNet's fire modules).
Weights are random and deterministic; ``width`` and ``size`` shrink each network for tests.
"""

from __future__ import annotations

import numpy as np

from .models import OnnxModel, _Graph

#: The opset older converters wrote these at (onnx model zoo's ``-9`` files).
CLASSIC_OPSET = 9


def _conv(
    g: _Graph,
    x: str,
    ci: int,
    co: int,
    k: int,
    stride: int = 1,
    pad: int = 0,
    explicit_pad: bool = False,
):
    """Biased Conv + ReLU; ``explicit_pad``: the padding as a ``Pad`` node in front, as TensorFlow's
    and older converters write it."""
    if explicit_pad and pad:
        x, pad = g.op("Pad", x, pads=[0, 0, pad, pad, 0, 0, pad, pad], mode="constant"), 0
    w = g.weight(co, ci, k, k, fan_in=ci * k * k)
    bias = g.const((0.1 * g.rng.standard_normal(co)).astype(np.float32), "bias")
    return g.op(
        "Relu",
        g.op(
            "Conv", x, g.const(w), bias, kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4
        ),
    )


def _lrn(g: _Graph, x: str) -> str:
    return g.op("LRN", x, size=5, alpha=1e-4, beta=0.75, bias=1.0)


def _max_pool(g: _Graph, x: str, k: int = 3, stride: int = 2, pad: int = 0) -> str:
    return g.op("MaxPool", x, kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4)


def _dense(g: _Graph, x: str, k: int, n: int, relu: bool) -> str:
    """Gemm with a transposed weight and a bias (Caffe's InnerProduct), ReLU and Dropout after
    it."""
    w, b = g.weight(n, k, fan_in=k), (0.1 * g.rng.standard_normal(n)).astype(np.float32)
    y = g.op("Gemm", x, g.const(w), g.const(b, "bias"), transB=1)
    return _dropout(g, g.op("Relu", y)) if relu else y


def _dropout(g: _Graph, x: str) -> str:
    """Inference Dropout with its mask output, as the converters kept it."""
    out, mask = g.name("dropout"), g.name("mask")
    g.nodes.append(g.onnx.helper.make_node("Dropout", [x], [out, mask], ratio=0.5))
    return out


def _flatten(g: _Graph, x: str, features: int) -> str:
    """``Reshape`` to a constant ``[1, features]``, what older exporters write for a flatten."""
    return g.op("Reshape", x, g.const(np.array([1, features], np.int64), "shape"))


def _model(g: _Graph, name: str, size: int, logits: str, classes: int) -> OnnxModel:
    x = g.rng.standard_normal((1, 3, size, size)).astype(np.float32)
    model = g.model(
        name, {"x": x}, g.op("Softmax", logits, axis=1), [1, classes], opset=CLASSIC_OPSET
    )
    model.proto.ir_version = 4  # what the opset-9 converters wrote
    return model


def alexnet(
    size: int = 224, width: int = 64, hidden: int = 4096, classes: int = 1000, seed: int = 0
) -> OnnxModel:
    """AlexNet (Caffe's bvlc_alexnet, single tower): five convolutions with LRN after the first two,
    three max pools, and three dense layers with Dropout."""
    g = _Graph(seed)
    y = _max_pool(g, _lrn(g, _conv(g, "x", 3, width, 11, stride=4, pad=2)))
    y = _max_pool(g, _lrn(g, _conv(g, y, width, 3 * width, 5, pad=2, explicit_pad=True)))
    y = _conv(g, y, 3 * width, 6 * width, 3, pad=1)
    y = _conv(g, y, 6 * width, 4 * width, 3, pad=1)
    y = _max_pool(g, _conv(g, y, 4 * width, 4 * width, 3, pad=1))
    side = _pooled(_pooled(_pooled((size + 4 - 11) // 4 + 1)))
    y = _dense(
        g, _flatten(g, y, 4 * width * side * side), 4 * width * side * side, hidden, relu=True
    )
    y = _dense(g, y, hidden, hidden, relu=True)
    return _model(
        g, f"alexnet_w{width}_{size}", size, _dense(g, y, hidden, classes, relu=False), classes
    )


def alexnet_head(
    size: int = 6, width: int = 8, hidden: int = 16, classes: int = 4, seed: int = 0
) -> OnnxModel:
    """AlexNet's forms on one convolution: LRN, max pool, Reshape-flatten, Gemm with ReLU and
    Dropout, Gemm, Softmax; the smallest classic graph (a handful of tuning tasks)."""
    g = _Graph(seed)
    y = _max_pool(g, _lrn(g, _conv(g, "x", 3, width, 3, pad=1)))
    features = width * _pooled(size) ** 2
    y = _dense(g, _flatten(g, y, features), features, hidden, relu=True)
    return _model(
        g, f"alexnet_head_w{width}_{size}", size, _dense(g, y, hidden, classes, relu=False), classes
    )


def _pooled(side: int, k: int = 3, stride: int = 2) -> int:
    return (side - k) // stride + 1


#: VGG-19's convolutions per stage (channels = width * 2**stage, at most 8 * width).
VGG19_STAGES = (2, 2, 4, 4, 4)


def vgg(
    size: int = 224,
    width: int = 64,
    hidden: int = 4096,
    classes: int = 1000,
    stages=VGG19_STAGES,
    seed: int = 0,
) -> OnnxModel:
    """VGG (19 layers by default): 3x3 convolutions with explicit ``Pad`` nodes, a 2x2 max pool per
    stage, and three dense layers with Dropout."""
    g = _Graph(seed)
    y, channels = "x", 3
    for stage, count in enumerate(stages):
        out = width * 2 ** min(stage, 3)
        for _ in range(count):
            y, channels = _conv(g, y, channels, out, 3, pad=1, explicit_pad=True), out
        y = _max_pool(g, y, k=2, stride=2)
    side = size // 2 ** len(stages)
    y = _dense(g, _flatten(g, y, channels * side * side), channels * side * side, hidden, relu=True)
    y = _dense(g, y, hidden, hidden, relu=True)
    return _model(
        g,
        f"vgg{sum(stages) + 3}_w{width}_{size}",
        size,
        _dense(g, y, hidden, classes, False),
        classes,
    )


def _inception(
    g: _Graph, x: str, ci: int, c1: int, r3: int, c3: int, r5: int, c5: int, pool: int
) -> tuple[str, int]:
    """GoogLeNet's inception module: 1x1, 1x1 -> 3x3, 1x1 -> 5x5 and 3x3 max pool -> 1x1 branches,
    concatenated."""
    branches = [
        _conv(g, x, ci, c1, 1),
        _conv(g, _conv(g, x, ci, r3, 1), r3, c3, 3, pad=1),
        _conv(g, _conv(g, x, ci, r5, 1), r5, c5, 5, pad=2),
        _conv(g, _max_pool(g, x, stride=1, pad=1), ci, pool, 1),
    ]
    return g.op("Concat", *branches, axis=1), c1 + c3 + c5 + pool


def googlenet(
    size: int = 224, width: int = 64, classes: int = 1000, modules: int = 9, seed: int = 0
) -> OnnxModel:
    """GoogLeNet (Inception v1, Caffe's bvlc_googlenet): stem with two LRNs, ``modules`` inception
    modules (9 in the real network; max pools after the 2nd and 7th), average pool, Dropout,
    dense."""
    g = _Graph(seed)
    y = _lrn(g, _max_pool(g, _conv(g, "x", 3, width, 7, stride=2, pad=3), pad=1))
    y = _max_pool(
        g, _lrn(g, _conv(g, _conv(g, y, width, width, 1), width, 3 * width, 3, pad=1)), pad=1
    )
    channels, side = 3 * width, -(-size // 8)
    w = width // 4  # the real network's branch widths, in 16ths of 64 channels
    for index in range(modules):
        y, channels = _inception(g, y, channels, 4 * w, 6 * w, 8 * w, w, 2 * w, 2 * w)
        if index in (1, 6) and index < modules - 1:
            y, side = _max_pool(g, y, pad=1), -(-side // 2)
    y = _dropout(g, g.op("AveragePool", y, kernel_shape=[side, side]))
    logits = _dense(g, _flatten(g, y, channels), channels, classes, relu=False)
    return _model(g, f"googlenet_w{width}_{size}", size, logits, classes)


def _fire(g: _Graph, x: str, ci: int, squeeze: int, expand: int) -> tuple[str, int]:
    """SqueezeNet's fire module: a 1x1 squeeze, then 1x1 and 3x3 expands concatenated."""
    s = _conv(g, x, ci, squeeze, 1)
    return g.op(
        "Concat", _conv(g, s, squeeze, expand, 1), _conv(g, s, squeeze, expand, 3, pad=1), axis=1
    ), 2 * expand


def squeezenet(size: int = 224, width: int = 16, classes: int = 1000, seed: int = 0) -> OnnxModel:
    """SqueezeNet 1.1: eight fire modules between three max pools, Dropout, a 1x1 classifier
    convolution with ReLU and a global average pool (no dense layer)."""
    g = _Graph(seed)
    y, channels = _max_pool(g, _conv(g, "x", 3, 4 * width, 3, stride=2)), 4 * width
    for index, (squeeze, expand) in enumerate(
        [(1, 4), (1, 4), (2, 8), (2, 8), (3, 12), (3, 12), (4, 16), (4, 16)]
    ):
        y, channels = _fire(g, y, channels, squeeze * width, expand * width)
        if index in (1, 3):
            y = _max_pool(g, y)
    y = _conv(g, _dropout(g, y), channels, classes, 1)
    logits = _flatten(g, g.op("GlobalAveragePool", y), classes)
    return _model(g, f"squeezenet_w{width}_{size}", size, logits, classes)


#: The classics by name, at their real sizes.
CLASSICS = {"alexnet": alexnet, "vgg19": vgg, "googlenet": googlenet, "squeezenet": squeezenet}
