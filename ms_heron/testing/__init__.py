"""What only tests and benchmarks use, as TVM keeps its ``meta_schedule/testing``: the ONNX model
zoo built in code (:mod:`.models`), the classics and exports of the corpus, and the inputs that
break an inexact int8 kernel (:mod:`.int8`). Product code never imports it."""
