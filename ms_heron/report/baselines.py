"""What a user would otherwise run, which ``ms-heron demo`` and ``tune-model`` compare with in the
same run: ONNX Runtime (a suite operator, an int8 GEMM, whole ONNX models) and numpy (fp32 GEMM).

Timed like ms_heron's kernels (median of repeats after a warm-up), on the same number of threads.
ONNX Runtime is an optional dependency (the ``bench`` extra); a clear error says how to get it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np

from ..errors import HeronError


class BaselineUnavailable(HeronError, RuntimeError):
    """The baseline's package is not installed; the message names the pip extra."""


def median_seconds(fn, repeat: int = 10, min_repeat_s: float = 0.1) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` samples of at least ``min_repeat_s``
    each."""
    fn()  # warm-up: allocations, thread pools, first-touch
    samples = []
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_repeat_s:
                break
        samples.append(elapsed / n)
    return float(np.median(samples))


def medians_in_turn(samplers: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each sampler (a function returning a latency in seconds) called in turn, ``rounds`` times;
    each one's median. Two cores drift within a minute (a neighbour's load halved ONNX Runtime's
    speed for minutes in one run): timed one after the other, the drift would land on one of
    them."""
    samples: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(rounds):
        for name, sample in samplers.items():
            samples[name].append(sample())
    return {name: float(np.median(secs)) for name, secs in samples.items()}


def _onnx_modules():
    try:
        import onnx  # pylint: disable=import-outside-toplevel
        import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    except ImportError as err:
        raise BaselineUnavailable(
            "the ONNX Runtime baseline needs onnxruntime and onnx: pip install 'ms-heron[bench]'"
        ) from err
    return onnx, ort


def onnxruntime_session(model, threads: int):
    """An ONNX Runtime CPU session on ``threads`` threads (all graph optimizations on, its
    default)."""
    _, ort = _onnx_modules()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def onnxruntime_model(
    model, inputs: dict[str, np.ndarray], threads: int
) -> tuple[list[np.ndarray], float]:
    """ONNX Runtime's outputs for ``inputs`` and its median latency on the same model."""
    sess = onnxruntime_session(model, threads)
    return sess.run(None, inputs), median_seconds(lambda: sess.run(None, inputs))


#: ONNX operators ONNX Runtime runs on u8 x s8 kernels that saturate on CPUs without VNNI, whatever
#: its graph optimization level.
INTEGER_OPS = frozenset({"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"})


def quantized(model) -> bool:
    """Whether the ONNX graph computes in int8: integer operators, or activations quantized (QDQ,
    ``quantize_dynamic``)."""
    return bool(
        (INTEGER_OPS | {"QuantizeLinear", "DynamicQuantizeLinear"})
        & {n.op_type for n in model.graph.node}
    )


def max_abs_diff(got, expected) -> float:
    """The largest absolute difference between two lists of outputs, over all of them."""
    return max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(got, expected))


def output_step(model) -> float | None:
    """The quantization step of an int8 graph's output: the scale of its last ``DequantizeLinear``
    with a constant scale (the largest, if per channel). None for float graphs and for dynamically
    quantized ones, whose outputs leave the integer domain through a scale computed at run time.
    An exact kernel may still land one step off the reference: the reference (QDQ run as written)
    requantizes float sums, which can round the other way."""
    if not quantized(model) or any(n.op_type == "DynamicQuantizeLinear" for n in model.graph.node):
        return None
    onnx, _ = _onnx_modules()
    inits = {i.name: i for i in model.graph.initializer}
    scales = [
        n.input[1]
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[1] in inits
    ]
    return float(onnx.numpy_helper.to_array(inits[scales[-1]]).max()) if scales else None


def onnxruntime_int8_saturates() -> bool:
    """Whether ONNX Runtime's u8 x s8 kernels saturate on this host: without AVX-512 VNNI or
    AVX-VNNI they multiply with ``vpmaddubsw``, which clamps each pair of products to s16 (255 x 127
    x 2 does not fit), so its int8 results are fast but not exact there."""
    # pylint: disable-next=import-outside-toplevel
    from ..hardware.dot_products import dot_product
    from ..hardware.targets import host_target  # pylint: disable=import-outside-toplevel

    dot = dot_product(host_target())
    return dot is None or dot.form != "vpdpbusd"


def reference_outputs(model, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs computed as its graph says, exactly: the reference for quantized models.

    ONNX Runtime's u8 x s8 kernels on a CPU without VNNI (AVX2, AVX-512BW) multiply with
    ``vpmaddubsw``, which saturates each pair of products at int16, so its int8 results differ from
    the model's arithmetic (2.9% of the output range on a small MLP on Zen 3). Graphs with integer
    operators run on ONNX's own reference evaluator (numpy, exact integer arithmetic, slow); others,
    QDQ graphs among them, on ONNX Runtime with its graph optimizations off, so that each
    ``DequantizeLinear`` -> float op -> ``QuantizeLinear`` runs as written instead of being fused
    into an integer kernel.
    """
    _, ort = _onnx_modules()
    if INTEGER_OPS & {node.op_type for node in model.graph.node}:
        from onnx.reference import ReferenceEvaluator  # pylint: disable=import-outside-toplevel

        return list(ReferenceEvaluator(model).run(None, dict(inputs)))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(inputs))


def onnxruntime_matmul_integer_seconds(M: int, N: int, K: int, threads: int) -> float:
    """Latency of ONNX Runtime's ``MatMulInteger`` (u8 [M, K] x s8 [K, N] -> s32), the int8 GEMM
    users reach for."""
    return median_seconds(onnxruntime_matmul_integer(M, N, K, threads))


def onnxruntime_matmul_integer(M: int, N: int, K: int, threads: int) -> Callable[[], object]:
    """One call of ONNX Runtime's ``MatMulInteger`` on fixed random operands, its result checked
    first (exact where :func:`onnxruntime_int8_saturates` says it can be)."""
    onnx, _ = _onnx_modules()
    helper, TensorProto = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["C"])],
        "int8_gemm",
        [
            helper.make_tensor_value_info("A", TensorProto.UINT8, [M, K]),
            helper.make_tensor_value_info("B", TensorProto.INT8, [K, N]),
        ],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [M, N])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 9)
    onnx.checker.check_model(model)
    sess = onnxruntime_session(model, threads)
    rng = np.random.default_rng(0)
    feeds = {
        "A": rng.integers(0, 256, (M, K), dtype=np.uint8),
        "B": rng.integers(-128, 128, (K, N), dtype=np.int8),
    }
    expected = feeds["A"].astype(np.int64) @ feeds["B"].astype(np.int64)
    if not np.array_equal(sess.run(None, feeds)[0], expected) and not onnxruntime_int8_saturates():
        raise AssertionError(
            "ONNX Runtime MatMulInteger disagrees with numpy; baseline not trustworthy"
        )
    return lambda: sess.run(None, feeds)


def numpy_matmul(M: int, N: int, K: int, dtype: str = "float32") -> Callable[[], object]:
    """One ``a @ b`` in numpy (its BLAS), the fp32 baseline, on fixed random operands."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    out = np.empty((M, N), dtype)
    return lambda: np.matmul(a, b, out=out)


def onnxruntime_operator_seconds(workload, threads: int) -> float:
    """ONNX Runtime's latency on an fp32 ``gemm`` (MatMul) or ``c2d`` (Conv) workload."""
    return median_seconds(onnxruntime_operator(workload, threads))


def onnxruntime_operator(workload, threads: int) -> Callable[[], object]:
    """One call of ONNX Runtime on an fp32 ``gemm`` (MatMul) or ``c2d`` (Conv) workload, both
    operands fed as inputs like the tuned kernel's; its result is checked against the workload's
    reference first.

    ONNX Runtime's Conv is NCHW with ``[CO, CI, KH, KW]`` weights: the same data is fed transposed.
    """
    onnx, _ = _onnx_modules()
    helper, TensorProto = onnx.helper, onnx.TensorProto
    if workload.dtype != "fp32" or workload.family not in ("gemm", "c2d"):
        raise ValueError(
            f"no ONNX Runtime baseline for {workload.family} {workload.dtype}; fp32 gemm and c2d "
            "have one"
        )
    x, w = workload.random_inputs(0)
    expected = workload.reference([x, w])
    if workload.family == "gemm":
        node, to_ort, from_ort = helper.make_node("MatMul", ["X", "W"], ["Y"]), (x, w), lambda y: y
    else:
        s = workload.shape
        node = helper.make_node(
            "Conv",
            ["X", "W"],
            ["Y"],
            kernel_shape=[s["KH"], s["KW"]],
            pads=[s["pad"]] * 4,
            strides=[s["stride"]] * 2,
            dilations=[s["dilation"]] * 2,
        )
        # NHWC -> NCHW, [KH,KW,CI,CO] -> OIHW
        to_ort = (
            x.transpose(0, 3, 1, 2).copy(),
            w.transpose(3, 2, 0, 1).copy(),
        )
        from_ort = lambda y: y.transpose(0, 2, 3, 1)  # noqa: E731
    graph = helper.make_graph(
        [node],
        workload.family,
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
            for n, a in zip("XW", to_ort)
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 9)
    sess = onnxruntime_session(model, threads)
    feeds = dict(zip("XW", to_ort))
    got = from_ort(sess.run(None, feeds)[0])
    if not np.allclose(got, expected, rtol=1e-3, atol=1e-3):
        raise AssertionError(
            f"ONNX Runtime's {node.op_type} disagrees with the reference; baseline not trustworthy"
        )
    return lambda: sess.run(None, feeds)
