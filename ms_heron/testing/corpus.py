"""Test-sized graphs of every form the corpus holds, built in code: the zoo's PyTorch-style
networks, the Caffe-era classics at opset 9, and int8 forms from ONNX Runtime's own quantizers.

Each builder returns a fresh :class:`~.models.OnnxModel`; the tests run every rewrite over each one.
``bench/corpus.py`` holds the full-size corpus, real exports from other tools included.
"""

from __future__ import annotations

from collections.abc import Callable

from . import classics, models
from .models import OnnxModel

#: name -> builder of a small graph, seconds to import and lower each on two cores.
SMALL: dict[str, Callable[[], OnnxModel]] = {
    "mlp": models.mlp,
    "cnn": models.cnn,
    "resnet": lambda: models.resnet50(size=32, width=8, blocks=(1, 1, 1, 1), classes=10),
    "mobilenetv2": lambda: models.mobilenet_v2(
        size=32, stages=((1, 16, 1, 1), (6, 24, 2, 2)), last=64, classes=10
    ),
    "bert": lambda: models.bert(layers=1, seq=8, hidden=32, heads=2, ffn=64),
    "alexnet": lambda: classics.alexnet(size=67, width=8, hidden=32, classes=10),
    "vgg": lambda: classics.vgg(size=32, width=4, hidden=32, classes=10, stages=(1, 1, 2, 1, 1)),
    "googlenet": lambda: classics.googlenet(size=32, width=16, classes=10, modules=3),
    "squeezenet": lambda: classics.squeezenet(size=35, width=4, classes=10),
    "mlp-int8": lambda: models.mlp(int8=True),
    "mlp-dynamic": lambda: models.quantized_dynamic(models.mlp()),
    "resnet-qdq": lambda: models.quantized_static(
        models.resnet_bottleneck(size=6, channels=32, width=16)
    ),
}
