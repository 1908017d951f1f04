"""Graphs written by other tools: older opsets, inference Dropout, LRN, explicit pads, forms no
rewrite knows. Every rewrite leaves what it does not know alone, and the models still compute what
ONNX Runtime computes."""

import math
import pathlib
import re
import warnings

import numpy as np
import onnx
import pytest
import tvm
import tvm_ffi
from conftest import kernel_calls, untuned
from onnx import TensorProto, helper
from tvm import relax

from ms_heron import report
from ms_heron.records import record_seconds
from ms_heron.relax import ModelError, extract_tasks, from_onnx, lower_for_tuning, run_model
from ms_heron.relax import passes as heron_passes
from ms_heron.relax.passes import skipped_passes
from ms_heron.report.baselines import onnxruntime_model
from ms_heron.testing import classics, corpus
from ms_heron.testing.models import OnnxModel
from ms_heron.tuning import RunSpec, TuningRun

#: Every rewrite ``ms_heron.relax.passes`` offers a stock pipeline.
REWRITES = {name: p for name, p in vars(heron_passes).items() if isinstance(p, tvm.transform.Pass)}
#: ``torch.onnx`` exports of transformers models at test size (``bench/corpus.py --export DIR --size
#: test`` wrote them with torch 2.13 and transformers 5.24; the suite needs neither).
EXPORTS = pathlib.Path(__file__).parent / "data" / "exports"


def _export(name: str) -> OnnxModel:
    return OnnxModel(
        name, onnx.load(EXPORTS / f"{name}.onnx"), dict(np.load(EXPORTS / f"{name}_inputs.npz"))
    )


#: The test corpus: graphs built here, then the exports.
GRAPHS = [*corpus.SMALL, *sorted(f"export-{path.stem}" for path in EXPORTS.glob("*.onnx"))]


def test_the_test_corpus_holds_the_built_graphs_and_eleven_exports():
    assert len(GRAPHS) == len(corpus.SMALL) + 11 and len(set(GRAPHS)) == len(GRAPHS), GRAPHS


@pytest.mark.parametrize("name", GRAPHS)
def test_every_rewrite_runs_over_every_graph_of_the_test_corpus_without_failing(name, cpu_target):
    """Each pass alone, on the imported graph (weights bound, as a stock pipeline has them), gives a
    well-formed module and raises nothing; where it could not rewrite a region it says so in the
    module (channels-last before Dropout and n-ary Sum are gone, which the lowering removes first),
    and the lowering itself, all passes in order, skips none."""
    assert len(REWRITES) >= 11, sorted(REWRITES)
    model = corpus.SMALL[name]() if name in corpus.SMALL else _export(name.removeprefix("export-"))
    mod = from_onnx(model.proto)
    for rewrite_name, rewrite in REWRITES.items():
        with cpu_target, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = rewrite(mod)
        assert relax.analysis.check_well_formed(out), rewrite_name
        notes = skipped_passes(out)
        assert len(notes) == len(
            [w for w in caught if "skipped" in str(w.message) or "left" in str(w.message)]
        )
        assert all(n.startswith("ChannelsLastConvolutions left") for n in notes), (
            rewrite_name,
            notes,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        notes = skipped_passes(lower_for_tuning(mod, None, cpu_target))
    assert notes == []  # Swin's Squeeze(axes=[-2]) once made ConvertLayout raise std::bad_alloc


def test_efficientnets_silu_and_squeeze_excite_stay_channels_last(cpu_target):
    """EfficientNet's SiLU and squeeze-and-excite sigmoid, written out with ``exp``, run in the
    channels-last layout of the convolutions around them: fast math rewrites ``exp`` after the
    layout pass (its call_tir is opaque to ConvertLayout), so no activation runs channels-first
    between two transposes (23 kernels did), and the only transposes left are the input's, the
    output's and the flatten's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = lower_for_tuning(from_onnx(_export("efficientnet").proto), None, cpu_target)
    kernels = [
        gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
    ]
    assert any("fast_exp" in k for k in kernels), kernels
    transposing = [k for k in kernels if "transpose" in k]
    assert not [k for k in transposing if "exp" in k] and len(transposing) <= 3, transposing


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit", "resnet", "swin"])
def test_torch_exports_of_transformers_models_match_onnxruntime(name, cpu_target):
    """Real exports (opset 20: Gelu, LayerNormalization, Where masks, index arithmetic) compile and
    compute what ONNX Runtime computes on the same file."""
    model = _export(name)
    assert model.proto.opset_import[0].version >= 18
    got = run_model(untuned(model.proto, cpu_target), model.inputs)
    expected, _ = onnxruntime_model(model.proto, model.inputs, threads=1)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(e).max())))


@pytest.mark.parametrize(
    ("op", "attrs", "exact"),
    [("Gelu", {"approximate": "none"}, "erf"), ("Gelu", {"approximate": "tanh"}, "tanh")]
    + [("Sigmoid", {}, "exp")],
)
def test_onnx_gelu_and_sigmoid_run_fast_math_in_the_matmul_kernel_and_match_onnxruntime(
    op, attrs, exact, cpu_target
):
    """Opset 20's ``Gelu`` (torch.onnx's for ViT and BERT) and ``Sigmoid`` (SiLU's) after a MatMul:
    written out, their ``erf``, ``tanh`` or ``exp`` becomes fast math in the matmul's kernel (no
    libm call, whose time depends on the data), unless exact math is asked; both match ONNX
    Runtime."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 16)).astype("float32")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node(op, ["m"], ["y"], **attrs),
        ],
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, 32))],
        [onnx.numpy_helper.from_array(rng.standard_normal((16, 32)).astype("float32"), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    for exact_math in (False, True):
        lowered = lower_for_tuning(from_onnx(model), None, cpu_target, exact_math=exact_math)
        (kernel,) = kernel_calls(lowered)
        assert kernel.startswith("fused_matmul") and op.lower() not in kernel, kernel
        assert (f"fast_{exact}" in kernel) != exact_math and exact in kernel, kernel
    (got,) = run_model(untuned(model, cpu_target), {"x": x})
    (expected,), _ = onnxruntime_model(model, {"x": x}, threads=1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_gpt2s_gelu_and_residual_adds_run_in_its_matmul_kernels(cpu_target):
    """GPT-2's ``Conv1D`` exports as a flattening Reshape, a 2-D MatMul and a Reshape back, and its
    tanh GELU cubes with ``Pow``: the GELU (as products, no ``pow``) and every residual add run in
    the kernel of the matmul before them, each matmul runs once, and no kernel is only
    element-wise."""
    model = _export("gpt2")
    calls = kernel_calls(lower_for_tuning(from_onnx(model.proto), None, cpu_target))
    kernels = sorted(set(calls))
    assert not [k for k in kernels if "power" in k], kernels
    (gelu,) = [k for k in kernels if "tanh" in k]
    assert gelu.startswith("fused_matmul"), kernels
    assert not [k for k in kernels if re.fullmatch(r"fused_(reshape\d*_)?add\d*", k)], kernels
    matmuls = sum(n.op_type in ("MatMul", "Gemm") for n in model.proto.graph.node)
    assert sum(re.match("(fused_)?matmul", k) is not None for k in calls) == matmuls


@pytest.mark.parametrize("name", ["alexnet", "vgg", "googlenet", "squeezenet"])
def test_caffe_era_classics_at_opset_9_lower_without_layout_round_trips_and_match_onnxruntime(
    name, cpu_target
):
    """Dropout, LRN, explicit pads, Reshape-flatten and Concat at opset 9 (the forms that crashed
    ``ConvertLayout``): no rewrite skipped, no Dropout or Pad kernel left, each LRN one kernel, and
    the only transposes the model's input and its flatten's, as kernels of their own."""
    model = corpus.SMALL[name]()
    assert model.proto.opset_import[0].version == classics.CLASSIC_OPSET
    ops = {n.op_type for n in model.proto.graph.node}
    lowered = lower_for_tuning(from_onnx(model.proto), None, cpu_target)
    assert skipped_passes(lowered) == []
    kernels = [
        gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
    ]
    assert not [k for k in kernels if "dropout" in k or re.fullmatch(r"(fused_)?pad\d*", k)], (
        kernels
    )
    assert not [k for k in kernels if "avg_pool3d" in k], kernels  # LRN's window is no pool
    if "LRN" in ops:
        lrn = [k for k in kernels if "power" in k]
        assert len(lrn) == sum(n.op_type == "LRN" for n in model.proto.graph.node) and all(
            "divide" in k for k in lrn
        )
    copies = [k for k in kernels if re.fullmatch(r"(fused_)?(transpose\d*_?)+(reshape\d*)?", k)]
    assert len(copies) == 2, kernels
    (got,) = run_model(untuned(model.proto, cpu_target), model.inputs)
    (expected,), _ = onnxruntime_model(model.proto, model.inputs, threads=1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_graph_with_inference_dropout_tunes_and_matches_onnxruntime(tmp_path, cpu_target):
    """AlexNet's head at opset 9 (convolution, LRN, pool, Reshape-flatten, Dropout with its mask,
    Gemm): the Dropout, once an InternalError in the channels-last lowering, is gone before tuning,
    and the tuned model computes what ONNX Runtime computes."""
    model = classics.alexnet_head()
    assert "Dropout" in {n.op_type for n in model.proto.graph.node}
    path = tmp_path / "alexnet_head.onnx"
    onnx.save(model.proto, path)
    run = TuningRun.create(tmp_path / "wd", RunSpec.of_model(path, {}, cpu_target, seed=0))
    assert not [t.name for t in run.task_times() if "dropout" in t.name]
    run.tune(len(run.task_times()) * 2, num_trials_per_iter=4)
    (got,) = run_model(run.compile(), model.inputs)
    (expected,), _ = onnxruntime_model(model.proto, model.inputs, threads=1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_an_embedding_lookup_tunes_on_the_tuners_random_indices_and_matches_onnxruntime(
    tmp_path, cpu_target
):
    """A Gather of a weight by the model's int64 input (every exported language model's embedding):
    the tuner times kernels on random indices, far out of range, on which TVM's unchecked gather
    crashed every candidate and left the task untuned; clamped, each candidate runs, and in-range
    indices (a negative one counts from the end, as ONNX says) read what ONNX Runtime reads."""
    weight = np.random.default_rng(0).standard_normal((50, 16)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "ids"], ["y"], axis=0)],
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 16])],
        initializer=[onnx.numpy_helper.from_array(weight, "w")],
    )
    path = tmp_path / "embedding.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    run = TuningRun.create(tmp_path / "wd", RunSpec.of_model(path, {}, cpu_target, seed=0))
    run.tune(len(run.task_times()) * 2, num_trials_per_iter=2)
    take = [t for t in run.task_times() if t.name.startswith("take")]
    assert len(take) == 1 and take[0].seconds < math.inf, run.task_times()
    assert all(
        record_seconds(r.run_secs) < math.inf for r in run.database().get_all_tuning_records()
    )
    ids = np.array([[0, 3, 49, -1, -50, 7]], np.int64)
    (got,) = run_model(run.compile(), {"ids": ids})
    (expected,), _ = onnxruntime_model(onnx.load(path), {"ids": ids}, threads=1)
    np.testing.assert_array_equal(got, expected)


def _one_node_model(node, x: np.ndarray):
    """An ONNX model (opset 13) of one float node from input ``x`` (its shape) to ``y``."""
    graph = helper.make_graph(
        [node],
        node.op_type.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _lrn_model(size: int, x: np.ndarray):
    return _one_node_model(
        helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=0.75, bias=2.0), x
    )


@pytest.mark.parametrize("size", [3, 5, 4])
def test_lrn_is_one_kernel_and_computes_the_onnx_specification(size, cpu_target):
    """The window of channels from ``c - (size - 1) // 2`` to ``c + size // 2``: ONNX Runtime's for
    odd sizes (it refuses even ones), numpy's spelling of the specification for all; TVM's own
    converter fails on even sizes."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, 7, 3, 4)).astype("float32")
    model = _lrn_model(size, x)
    lowered = lower_for_tuning(from_onnx(model), None, cpu_target)
    assert len(extract_tasks(lowered, cpu_target)) == 1
    (got,) = run_model(untuned(model, cpu_target), {"x": x})
    window = np.zeros_like(x)
    for c in range(7):
        window[:, c] = (x[:, max(0, c - (size - 1) // 2) : c + size // 2 + 1] ** 2).sum(axis=1)
    np.testing.assert_allclose(got, x / (2.0 + 0.3 / size * window) ** 0.75, rtol=1e-5, atol=1e-6)
    if size % 2:
        (expected,), _ = onnxruntime_model(model, {"x": x}, threads=1)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "op, attrs, rewritten",
    [
        # EfficientNet's
        (
            "AveragePool",
            {"kernel_shape": [32, 32], "strides": [32, 32], "ceil_mode": 1},
            True,
        ),
        ("MaxPool", {"kernel_shape": [32, 32], "strides": [32, 32], "ceil_mode": 1}, True),
        (
            "AveragePool",
            {"kernel_shape": [9, 9], "pads": [1, 1, 1, 1], "count_include_pad": 0},
            True,
        ),
        (
            "AveragePool",
            {"kernel_shape": [9, 9], "pads": [1, 1, 1, 1], "count_include_pad": 1},
            False,
        ),
        # a true sliding window
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "strides": [2, 2]},
            False,
        ),
    ],
)
def test_a_pooling_whose_window_holds_the_whole_input_is_a_mean_and_matches_onnxruntime(
    op, attrs, rewritten, cpu_target
):
    """Hugging Face's EfficientNet pools a 7 x 7 map with a 1280-wide window (ceil mode): TVM padded
    the input to the window, an 8.5 GB buffer. Such a pooling is a mean or max over the image; one
    whose divisor counts padding, or whose windows slide, stays a pooling."""
    x = np.random.default_rng(0).standard_normal((1, 16, 7, 7)).astype("float32")
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    lowered = lower_for_tuning(from_onnx(_one_node_model(node, x)), None, cpu_target)
    pooling = [t.task_name for t in extract_tasks(lowered, cpu_target) if "pool" in t.task_name]
    assert bool(pooling) != rewritten, pooling
    (got,) = run_model(untuned(_one_node_model(node, x), cpu_target), {"x": x})
    (expected,), _ = onnxruntime_model(_one_node_model(node, x), {"x": x}, threads=1)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _dropout_tuple_module(cpu_target):
    """A Relax model (as ``relax.frontend`` users bring one) whose output is the Dropout's (output,
    mask) tuple itself, after a convolution: the form Relax's ConvertLayout raises on."""
    rng = np.random.default_rng(0)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 6, 6), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            w = relax.const(rng.standard_normal((8, 4, 3, 3)).astype("float32"))
            y = builder.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w, padding=[1, 1, 1, 1])))
            out = builder.emit_output(relax.op.nn.dropout(y, 0.5))
        builder.emit_func_output(out)
    return builder.get()


def test_a_rewrite_that_meets_an_unknown_form_is_skipped_and_the_report_says_so(
    tmp_path, cpu_target
):
    """The channels-last rewrite on a tuple-valued Dropout output: Relax's ConvertLayout raises an
    InternalError; the rewrite leaves the convolution before it NCHW, the model lowers, tunes and
    runs, and the run's report names the rewrite in one line."""
    mod = _dropout_tuple_module(cpu_target)
    with (
        cpu_target,
        pytest.warns(
            UserWarning, match="ChannelsLastConvolutions left 1 of 1 convolutions NCHW: Check"
        ),
    ):
        alone = heron_passes.channels_last_convolutions(mod)
    assert tvm_ffi.structural_equal(alone["main"], mod["main"]) and len(skipped_passes(alone)) == 1
    run = TuningRun.create(tmp_path, RunSpec.of_relax(mod, None, tmp_path, cpu_target, seed=0))
    with pytest.warns(UserWarning, match="ChannelsLastConvolutions left"):
        (line,) = skipped_passes(run.lowered)
    assert re.fullmatch(
        r"ChannelsLastConvolutions left 1 of 1 .*: Check failed: .*nested to match tuple", line
    )
    run.tune(4, num_trials_per_iter=4)
    text = report.write(run)[0].read_text()
    assert f"- {line}" in text.split("## Rewrites skipped")[1]
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype("float32")
    vm = relax.VirtualMachine(run.compile(), tvm.cpu())
    out, mask = vm["main"](tvm.runtime.tensor(x))
    assert (
        out.numpy().shape == (1, 8, 6, 6) and (out.numpy() >= 0).all() and (mask.numpy() == 1).all()
    )


def test_a_graph_tvm_cannot_import_is_one_line_naming_the_operator():
    """MaxPool with its indices output: TVM's importer fails on an assertion; the user reads one
    line."""
    x = np.zeros((1, 2, 4, 4), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    with pytest.raises(
        ModelError, match=r"^TVM's ONNX importer cannot import this model: .* in MaxPool; export"
    ):
        from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
