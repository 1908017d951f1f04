"""What tuning is measured on and against, as TVM keeps its ``meta_schedule/testing``.

``workloads``: Heron's operator suite with numpy references; ``models``: the ONNX model zoo built in
code; ``baselines``: numpy and ONNX Runtime timings; ``peak``: the FMA and VNNI peaks measured now.
"""
