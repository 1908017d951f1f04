"""What only tests and benchmarks use, as TVM keeps its ``meta_schedule/testing``: the ONNX model
zoo built in code (:mod:`.models`). Product code never imports it."""
