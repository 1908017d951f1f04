"""Whole models through Relax: nn.Module and ONNX import, tuning, compilation, fallback, bad
input."""

import json
import math
import re
import warnings

import numpy as np
import onnx
import pytest
import tvm
from conftest import (
    HOST_DOT,
    assert_same_outputs,
    kernel_calls,
    ms_heron_cli,
    timing_out_runner,
    untuned,
)
from onnx import TensorProto, helper
from rule_helpers import finished, schedule_steps
from tvm import relax
from tvm.relax.frontend import nn
from tvm.s_tir import meta_schedule as ms

from ms_heron.cli.tune_model import check_outputs
from ms_heron.hardware.dot_products import kernel_dot_product
from ms_heron.hardware.peak import flops_per_byte
from ms_heron.hardware.targets import has_avx_vnni, has_vnni, host_target, vector_bytes
from ms_heron.records import confirmed_seconds, open_database, record_seconds
from ms_heron.relax import (
    ModelError,
    bind_params,
    compile_model,
    extract_tasks,
    from_onnx,
    lower_for_tuning,
    run_model,
    untuned_tasks,
)
from ms_heron.relax.passes import (
    channels_last_epilogues,
    quantization_round_trips,
    skipped_passes,
)
from ms_heron.relax.passes.winograd import F2, F4, chosen_form, padded_rows
from ms_heron.report.baselines import max_abs_diff, onnxruntime_model, reference_outputs
from ms_heron.schedule.annotations import is_metaschedule_space
from ms_heron.space import HeronSpace, design_spaces
from ms_heron.testing import models
from ms_heron.tuning import (
    RunError,
    RunSpec,
    TuningRun,
    static_shape_tuning_pipeline,
    tune_model,
    tune_pass,
)
from ms_heron.tuning.fallback import fallback_database
from ms_heron.workloads.evaluate import WrongResult


class _TwoLayer(nn.Module):
    def __init__(self):
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(nn.relu(self.fc1(x)))


def _two_layer():
    """The module (its function is ``forward``, not ``main``), weights, an input and numpy's
    answer."""
    mod, named = _TwoLayer().export_tvm(spec={"forward": {"x": nn.spec.Tensor((8, 32), "float32")}})
    rng = np.random.default_rng(0)
    params = {
        name: (rng.standard_normal([int(d) for d in p.shape]) / 8).astype("float32")
        for name, p in named
    }
    x = rng.standard_normal((8, 32)).astype("float32")
    hidden = np.maximum(x @ params["fc1.weight"].T + params["fc1.bias"], 0)
    return mod, params, x, hidden @ params["fc2.weight"].T + params["fc2.bias"]


def test_nn_module_tunes_compiles_and_matches_numpy(tmp_path, cpu_target):
    mod, params, x, expected = _two_layer()
    rounds = []
    db = tune_model(
        mod,
        params,
        cpu_target,
        str(tmp_path),
        8,
        num_trials_per_iter=4,
        seed=0,
        on_round=rounds.append,
    )
    tuned = [r for r in rounds if not r.confirmed]  # the last: its best kernels timed again
    assert len({r.task for r in tuned}) == 2 and all(
        r.task.startswith("fused_matmul") for r in tuned
    )
    assert (
        rounds[-1].confirmed and rounds[-1].trials >= 8 and rounds[-1].best_seconds < float("inf")
    )
    # timed by the cold-weights runner: ten single calls each, minus any stretched past 1.5x their
    # median (MetaSchedule's default runner records one mean)
    timed = [
        [float(x) for x in r.run_secs]
        for r in db.get_all_tuning_records()
        if record_seconds(r.run_secs) < float("inf")
    ]
    assert timed and all(5 <= len(secs) <= 10 for secs in timed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every task has a tuned kernel: no fallback warning
        executable = compile_model(db, mod, params, cpu_target)
    (got,) = run_model(executable, {"x": x}, func="forward")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)  # fp32, summation order differs


def test_a_stock_style_relax_pipeline_takes_heron_by_swapping_one_pass(tmp_path, cpu_target):
    """TVM's static-shape tuning pipeline with HeronTuneIRMod in MetaScheduleTuneIRMod's place: the
    kernels are Heron's (their records carry HeronSpace's annotations), applied, and right."""
    mod, params, x, expected = _two_layer()
    tuned = static_shape_tuning_pipeline(8, cpu_target, str(tmp_path), max_trials_per_task=4)(
        bind_params(mod, params)
    )
    kernels = [f for f in tuned.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) == 2 and all(f.attrs.get("tirx.is_scheduled", False) for f in kernels)
    records = ms.database.JSONDatabase(work_dir=str(tmp_path)).get_all_tuning_records()
    assert len(records) == 8 and all(
        any(
            str(i.attrs[0]).startswith("ms_heron.")
            for i in r.trace.insts
            if i.kind.name == "Annotate"
        )
        for r in records
    )
    vm = tvm.relax.VirtualMachine(tvm.compile(tuned, target=cpu_target), tvm.cpu())
    np.testing.assert_allclose(
        vm["forward"](tvm.runtime.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="run it under `with tvm.target.Target"):
        tune_pass({}, str(tmp_path / "no_target"), 4)(bind_params(mod, params))


def test_fp32_conv_and_dense_weights_are_packed_at_compile_time_and_match_onnxruntime(
    tmp_path, cpu_target
):
    """A model's fp32 constant weights (an NCHW convolution's and a dense layer's) are stored in the
    order the tuned kernels read them: every tuned task's best program re-lays them out
    (RewriteLayout), the compiled model does that once at compile time, and it computes what ONNX
    Runtime computes."""
    model = models.cnn()
    mod = from_onnx(model.proto, model.input_shapes())
    db = tune_model(mod, None, cpu_target, str(tmp_path), 16, num_trials_per_iter=4, seed=0)
    best = {}  # the best record of each task that reads a constant weight, by operator
    for record in db.get_all_tuning_records():
        func = record.workload.mod["main"]
        if func.attrs is None or not list(func.attrs.get("layout_free_buffers", [])):
            continue
        kind = "conv" if "conv2d" in func.script() else "dense"
        seconds = record_seconds(record.run_secs)
        if seconds < best.get(kind, (float("inf"), None))[0]:
            best[kind] = (seconds, record)
    assert set(best) == {"conv", "dense"}
    for kind, (_, record) in best.items():
        assert "meta_schedule.layout_rewrite_preproc" in str(record.trace), kind
    executable = compile_model(db, mod, None, cpu_target)
    assert "layout_rewrite" not in executable.as_text()  # re-laid out once, at compile time
    (got,) = run_model(executable, model.inputs)
    (expected,), _ = onnxruntime_model(model.proto, model.inputs, threads=2)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_float_convolutions_run_channels_last_with_their_epilogues(tmp_path, cpu_target):
    """A ResNet bottleneck's three convolutions lower to NHWC kernels (lanes along the output
    channels), each with its bias, and the last with the residual add and ReLU, fused; the only
    other kernels are the transposes at the model's input and output; the tuned model computes what
    ONNX Runtime computes."""
    model = models.resnet_bottleneck(size=6, channels=16, width=8)
    mod = from_onnx(model.proto, model.input_shapes())
    lowered = lower_for_tuning(mod, None, cpu_target)
    names = [t.task_name for t in extract_tasks(lowered, cpu_target)]
    assert (
        sorted(re.sub(r"\d+", "", n) for n in names if not n.startswith("fused_conv2d"))
        == ["transpose"] * 2
    ), names
    convs = [f for gv, f in lowered.functions_items() if gv.name_hint.startswith("fused_conv2d")]
    outputs = [[int(d) for d in f.params[-1].shape] for f in convs]
    assert len(convs) == 3 and all(shape[1:3] == [6, 6] for shape in outputs), outputs  # N, H, W, C
    assert any(n.count("_add") == 2 and "_relu" in n for n in names), names
    db = tune_model(mod, None, cpu_target, str(tmp_path), 12, num_trials_per_iter=4, seed=0)
    executable = compile_model(db, mod, None, cpu_target)
    (got,) = run_model(executable, model.inputs)
    (expected,), _ = onnxruntime_model(model.proto, model.inputs, threads=2)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_3x3_convolutions_run_as_winograd_with_their_epilogue_and_match_onnxruntime(
    tmp_path, cpu_target
):
    """A 3x3 stride-1 convolution with 16 channels becomes Winograd's three tasks: the input
    transform, the batched GEMM over the transformed planes (its rows, one per output tile of the
    form the host's balance chooses, padded to whole register tiles) and the output transform
    carrying the bias and ReLU; the 1x1
    convolutions stay convolutions, and the tuned model computes what ONNX Runtime computes."""
    model = models.resnet_bottleneck(size=6, channels=16, width=16)
    mod = from_onnx(model.proto, model.input_shapes())
    lowered = lower_for_tuning(mod, None, cpu_target)
    names = sorted(re.sub(r"\d+", "", t.task_name) for t in extract_tasks(lowered, cpu_target))
    assert names == [
        "fused_convd_add_add_relu",
        "fused_convd_add_relu",
        "fused_winograd_output_add_relu",
        "matmul",
        "transpose",
        "transpose",
        "winograd_input",
    ], names
    (gemm,) = [f for gv, f in lowered.functions_items() if gv.name_hint.startswith("matmul")]
    planes, rows, channels = (int(d) for d in gemm.params[0].shape)
    form = chosen_form((1, 6, 6, 16), 16, cpu_target, flops_per_byte(cpu_target))
    assert (planes, channels) == (form.side**2, 16)
    tiles = form.tiles(6) ** 2  # 3x3 tiles of a 6x6 image, or 2x2
    assert rows == padded_rows(tiles, cpu_target) and rows >= tiles
    db = tune_model(mod, None, cpu_target, str(tmp_path), 28, num_trials_per_iter=4, seed=0)
    (got,) = run_model(compile_model(db, mod, None, cpu_target), model.inputs)
    (expected,), _ = onnxruntime_model(model.proto, model.inputs, threads=2)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_winograd_gemm_rows_pad_to_the_register_tile_that_wastes_least():
    """49 tiles (a 14x14 image) cannot be cut into 6-row tiles (the most two vectors of columns
    leave room for in AVX2's 16 registers): 5-row tiles pad them to 50; rows a tile already divides
    stay, and on AVX-512 7-row tiles divide them."""
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
    assert [padded_rows(rows, avx2) for rows in (49, 196, 784, 16, 9)] == [50, 196, 784, 16, 10]
    avx512 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    assert padded_rows(49, avx512) == 49  # 7 rows by two vectors fit AVX-512's 32 registers


@pytest.mark.parametrize(
    "flops_per_byte, planes, width",
    [(math.inf, 16, 33), (0.0, 36, 65)],
    ids=["F(2x2, 3x3)", "F(4x4, 3x3)"],
)
def test_winograd_transforms_compute_the_convolution_on_cropped_tiles_and_padded_rows(
    cpu_target, flops_per_byte, planes, width
):
    """Untuned, each form computes ONNX Runtime's convolution where its tiles do not fit: a 5-pixel
    high image (the last tile row and column are cropped) whose tiles are padded to whole register
    tiles of GEMM rows, which must stay zero and out of the output. Memory free (0 flops per byte),
    the form with the fewest multiply-adds is chosen; memory infinitely slow, F(2x2, 3x3)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16, 3, 3)).astype("float32") / 8
    x = rng.standard_normal((1, 16, 5, width)).astype("float32")
    model = _one_node_model(
        helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
        x,
        [onnx.numpy_helper.from_array(w, "w")],
    )
    mod = from_onnx(model)
    lowered = lower_for_tuning(mod, None, cpu_target, flops_per_byte=flops_per_byte)
    (transform,) = [f for gv, f in lowered.functions_items() if "winograd_input" in gv.name_hint]
    tile = 2 if planes == 16 else 4
    tiles = -(-5 // tile) * -(-width // tile)  # 3 x 17 or 2 x 17
    assert [int(d) for d in transform.params[-1].shape] == [
        planes,
        padded_rows(tiles, cpu_target),
        16,
    ]
    assert padded_rows(tiles, cpu_target) > tiles  # neither 51 nor 34 is cut into 4 to 14 rows
    with pytest.warns(UserWarning, match="no tuned schedule"):
        executable = compile_model(
            ms.database.MemoryDatabase(), mod, None, cpu_target, flops_per_byte=flops_per_byte
        )
    (got,) = run_model(executable, {"x": x})
    (expected,), _ = onnxruntime_model(model, {"x": x}, threads=1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("flops_per_byte", [math.inf, 0.0], ids=["F(2x2, 3x3)", "F(4x4, 3x3)"])
def test_winograd_transforms_run_tile_by_tile_unrolled_with_their_epilogue(
    cpu_target, flops_per_byte
):
    """Each transform's loops run over tiles, then a tile's planes (input) or pixels (output)
    unrolled, then one vector of channels, and HeronSpace's design spaces keep them so: tiles (and
    groups of channels) in parallel, the unrolled loops' coefficients constants (a tile's window
    read once per group), channels in vector lanes.
    Fused into the parallel loop, the planes evaluated their selects once per row of channels:
    F(2x2, 3x3)'s input transform ran 3.5x slower. The output transform takes its epilogue in (a
    bottleneck's bias and ReLU), one pass over the output. (MetaSchedule's own space, which
    HeronSpace adds, computes it pixel by pixel inside the epilogue's loops instead.)"""
    model = models.resnet_bottleneck(size=8, channels=16, width=16)
    mod = from_onnx(model.proto, model.input_shapes())
    lowered = lower_for_tuning(mod, None, cpu_target, flops_per_byte=flops_per_byte)
    side = 4 if math.isinf(flops_per_byte) else 6
    for name, unrolled in (("winograd_input", [side * side]), ("winograd_output", [side - 2] * 2)):
        (transform,) = [f for gv, f in lowered.functions_items() if name in gv.name_hint]
        spaces = [
            space
            for space in design_spaces(transform, cpu_target, HeronSpace())
            if not is_metaschedule_space(space.trace)
        ]
        assert spaces
        for space in spaces:
            sch = finished(space, transform)
            (block,) = sch.get_child_blocks(sch.get_sblock("root"))[-1:]
            assert sch.get(block).name_hint == name, sch.mod.script()  # the epilogue inside
            loops = [sch.get(lp) for lp in sch.get_loops(block)]
            kinds = [loop.kind for loop in loops]
            assert kinds[0] == tvm.tirx.ForKind.PARALLEL, sch.mod.script()
            assert kinds[-1] == tvm.tirx.ForKind.VECTORIZED, sch.mod.script()
            assert int(loops[-1].extent) == min(16, vector_bytes(cpu_target) // 4)
            assert [
                int(loop.extent) for loop in loops if loop.kind == tvm.tirx.ForKind.UNROLLED
            ] == unrolled, sch.mod.script()


def test_winograd_takes_the_larger_tile_where_its_weights_are_reused_enough():
    """At 7 flops per byte of memory bandwidth (a 2-core Zen 3's), ResNet-50's first stage (56x56,
    64 channels: 196 tiles of 4x4) takes F(4x4, 3x3), 1.8x fewer multiply-adds; its last (7x7, 512
    channels) keeps F(2x2, 3x3), as F(4x4, 3x3)'s 4 tiles would read 38 MB of weights, 2.25 times
    F(2x2, 3x3)'s, for a quarter of the rows. Without a measured balance (another machine's target),
    F(2x2, 3x3) everywhere."""
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
    assert chosen_form((1, 56, 56, 64), 64, avx2, 7.0) is F4
    assert chosen_form((1, 28, 28, 128), 128, avx2, 7.0) is F4
    assert chosen_form((1, 7, 7, 512), 512, avx2, 7.0) is F2
    assert chosen_form((1, 56, 56, 64), 64, avx2, math.inf) is F2


def test_a_model_run_lowers_with_the_balance_it_began_with(tmp_path, cpu_target):
    """A model run keeps the host's flops per byte it measured when it began, and each later
    process lowers with that value, not its own measurement: the Winograd forms, so the tasks and
    their records, stay the same. A run file written before the value was kept lowers every 3x3
    convolution as F(2x2, 3x3), as it was tuned."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, 56, 56)).astype("float32")
    w = rng.standard_normal((64, 64, 3, 3)).astype("float32") / 24
    path = tmp_path / "conv.onnx"
    onnx.save(
        _one_node_model(
            helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
            x,
            [onnx.numpy_helper.from_array(w, "w")],
        ),
        path,
    )
    spec = RunSpec.of_model(path, {}, cpu_target, 0)
    assert spec.flops_per_byte == flops_per_byte(cpu_target) > 0
    run_file = TuningRun.create(tmp_path / "wd", spec).work_dir / "ms_heron_run.json"

    def planes() -> int:
        (gemm,) = [
            f
            for gv, f in TuningRun.open(tmp_path / "wd").lowered.functions_items()
            if gv.name_hint.startswith("matmul")
        ]
        return int(gemm.params[0].shape[0])

    expected = chosen_form((1, 56, 56, 64), 64, cpu_target, spec.flops_per_byte)
    assert planes() == expected.side**2
    fields = json.loads(run_file.read_text())
    run_file.write_text(json.dumps({**fields, "flops_per_byte": 0.0}))  # memory free: F(4x4)
    assert planes() == 36
    del fields["flops_per_byte"]  # a run from before the choice
    run_file.write_text(json.dumps(fields))
    assert planes() == 16


def test_failed_tasks_fall_back_to_untuned_kernels(tmp_path, cpu_target):
    """Every candidate is killed by a real runner timeout: compile warns, and the model still runs
    right."""
    mod, params, x, expected = _two_layer()
    db = tune_model(
        mod,
        params,
        cpu_target,
        str(tmp_path),
        4,
        num_trials_per_iter=2,
        seed=0,
        runner=timing_out_runner(),
    )
    with pytest.warns(UserWarning, match=r"2 task\(s\) have no tuned schedule"):
        executable = compile_model(db, mod, params, cpu_target)
    (got,) = run_model(executable, {"x": x}, func="forward")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_run_compiled_before_its_tasks_are_tuned_runs_the_analytical_kernels(
    tmp_path, cpu_target
):
    """A run stopped before every task had a round compiles each untuned task with the program
    HeronSearch would measure first (a tiled schedule; one warning counts them) beside the tuned
    ones, and computes what the model computes; asked for "naive" it runs TVM's untuned kernels."""
    mod, params, x, expected = _two_layer()
    work = tmp_path / "run"
    run = TuningRun.create(work, RunSpec.of_relax(mod, params, work, cpu_target, 0, label="two"))
    run.tune(1, num_trials_per_iter=1)  # one record: one task of the two is tuned
    (untuned_task,) = untuned_tasks(run.database(), run.tasks, run.target)
    with pytest.warns(
        UserWarning,
        match=r"1 task\(s\) have no tuned schedule: 1 run the program the search would measure",
    ):
        executable = run.compile()
    (got,) = run_model(executable, {"x": x}, func="forward")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    with pytest.warns(UserWarning, match="would measure first"):
        fallback = fallback_database(run.database(), run.tasks, run.target, "analytical")
    (task,) = [t for t in run.tasks if t.name == untuned_task]
    picked = fallback.query_schedule(task.mod, run.target, task.name)
    assert "SamplePerfectTile" in {inst.kind.name for inst in picked.trace.insts}

    assert fallback_database(run.database(), run.tasks, run.target, "naive") is None
    with pytest.warns(
        UserWarning, match=rf"1 task\(s\) .* untuned \(slow\) kernels: {untuned_task}"
    ):
        naive = run.compile(untuned="naive")
    (got,) = run_model(naive, {"x": x}, func="forward")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_int8_onnx_model_through_the_cli_reaches_the_dot_product_and_is_exact(
    tmp_path, int8_target
):
    """MatMulInteger layers (u8 with zero point x s8) become kernels of the CPU's dot product with
    weights packed at compile time, and compute what the model's exact arithmetic computes."""
    model = models.mlp(int8=True)
    path = tmp_path / "mlp.onnx"
    onnx.save(model.proto, path)
    proc = ms_heron_cli(
        "tune-model", path, "--trials", 12, "--round-size", 4, "--work-dir", tmp_path / "wd"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"task 3/3 .*: best [\d.]+ ms", proc.stdout), proc.stdout
    assert re.search(r"best kernels timed again \| model ~[\d.]+ ms", proc.stdout), proc.stdout
    # ONNX Runtime, where it is exact (VNNI), or the exact reference, where its kernels saturate
    assert re.search(
        r"outputs checked against (ONNX Runtime|the exact reference) on a random input: correct",
        proc.stdout,
    )

    vm = tvm.relax.VirtualMachine(
        tvm.runtime.load_module(str(tmp_path / "wd" / "mlp_tuned.so")), tvm.cpu()
    )
    got = vm["main"](tvm.runtime.tensor(model.inputs["x"])).numpy()
    (expected,) = reference_outputs(model.proto, model.inputs)
    # Same integer arithmetic; only the final fp32 rescale may round differently.
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)

    mod = from_onnx(model.proto, model.input_shapes())
    executable = compile_model(open_database(tmp_path / "wd"), mod, None, int8_target)
    assert HOST_DOT.form in executable.mod.imports[0].inspect_source("asm")
    # weights were re-laid out once, at compile time
    assert "layout_rewrite" not in executable.as_text()
    _model_work_dir_reports_shows_and_resumes(tmp_path / "wd", path)


def _one_node_model(node, x: np.ndarray, initializers, output_type=TensorProto.FLOAT):
    """An ONNX model of one node from input ``x`` (its shape and dtype) to ``y``."""
    graph = helper.make_graph(
        [node],
        node.op_type.lower(),
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", output_type, None)],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _conv_integer_model(x, w, attrs, weight_zero_point=None):
    """One ONNX ConvInteger (input zero point 128) over a u8 input of ``x``'s shape, weight
    ``w``."""
    inits = [
        onnx.numpy_helper.from_array(w, "w"),
        onnx.numpy_helper.from_array(np.array(128, np.uint8), "zp"),
    ]
    if weight_zero_point is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(weight_zero_point, w.dtype), "w_zp"))
    node = helper.make_node(
        "ConvInteger",
        ["x", "w", "zp", *(["w_zp"] if weight_zero_point is not None else [])],
        ["y"],
        **attrs,
    )
    return _one_node_model(node, x, inits, TensorProto.INT32)


@pytest.mark.parametrize(
    "ci, co, k, attrs, weight_dtype, weight_zero_point",
    [
        (8, 16, 3, dict(pads=[1, 1, 1, 1]), np.int8, None),
        (8, 16, 3, dict(pads=[1, 0, 0, 1], strides=[2, 2]), np.int8, None),
        (3, 16, 7, dict(auto_pad="SAME_UPPER", strides=[2, 2]), np.int8, None),
        (3, 8, 2, dict(auto_pad="SAME_LOWER"), np.int8, None),
        (8, 16, 3, dict(pads=[1, 1, 1, 1], group=2), np.int8, None),
        (8, 16, 1, dict(), np.uint8, 100),
    ],
)
def test_onnx_conv_integer_imports_and_computes_what_onnxruntime_computes(
    ci, co, k, attrs, weight_dtype, weight_zero_point, cpu_target
):
    """TVM's frontend has no ConvInteger; ms_heron's converter pads the input with its zero point
    (as ONNX Runtime does) and gives the same int32 results, bit for bit. A layer with no VNNI form
    (grouped, u8 weights, a weight zero point) is widened to int32 and named in a warning."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, ci, 9, 9)).astype(np.uint8)
    w = rng.integers(
        -127 if weight_dtype == np.int8 else 0, 128, (co, ci // attrs.get("group", 1), k, k)
    ).astype(weight_dtype)
    model = _conv_integer_model(x, w, dict(kernel_shape=[k, k], **attrs), weight_zero_point)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = from_onnx(model)
    widened = [str(c.message) for c in caught if "without VNNI" in str(c.message)]
    if attrs.get("group", 1) > 1:
        assert widened == [
            f"ConvInteger [1, {ci}, 9, 9] x [{co}, {ci // 2}, {k}, {k}]: it is grouped (2 groups), "
            "so it runs as an int32 convolution without VNNI"
        ]
    elif weight_dtype == np.uint8:
        assert widened and "VNNI multiplies u8 by s8, not uint8 by uint8" in widened[0]
    else:
        assert not widened
    executable = compile_model(ms.database.MemoryDatabase(), mod, None, cpu_target)
    (got,) = run_model(executable, {"x": x})
    (expected,), _ = onnxruntime_model(model, {"x": x}, threads=1)
    assert got.dtype == np.int32 and np.array_equal(got, expected)


def test_int8_onnx_convolutions_reach_the_dot_product_with_fused_epilogues_and_are_exact(
    tmp_path, int8_target
):
    """An int8 ResNet bottleneck (ConvInteger): each convolution runs channels-last on the CPU's dot
    product with its weights packed at compile time, its rescale, bias, ReLU and the next layer's
    quantize fused into its kernel (the transposes between convolutions cancel), and the model
    computes what its exact arithmetic computes."""
    model = models.resnet_bottleneck(size=6, channels=32, width=16, int8=True)
    mod = from_onnx(model.proto, model.input_shapes())
    names = [
        t.task_name for t in extract_tasks(lower_for_tuning(mod, None, int8_target), int8_target)
    ]
    # the kernels that end a convolution: its own, or its integer Winograd output transform (where
    # the dot product widens: tests/test_integer_winograd.py)
    convs = [n for n in names if "conv2d" in n or "winograd_output" in n]
    assert len(convs) == 3 and sum("_relu" in n and "_quantize" in n for n in convs) == 2, names
    assert not any("transpose" in n and ("cast" in n or "conv2d" in n) for n in names), names
    db = tune_model(
        mod, None, int8_target, str(tmp_path), 4 * len(names), num_trials_per_iter=4, seed=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every task tuned
        executable = compile_model(db, mod, None, int8_target)
    assert HOST_DOT.form in executable.mod.imports[0].inspect_source("asm")
    assert "layout_rewrite" not in executable.as_text()  # weights re-laid out once, at compile time
    (got,) = run_model(executable, model.inputs)
    (expected,) = reference_outputs(model.proto, model.inputs)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("quantized", ["matmul_integer", "qdq_conv"])
def test_every_sample_of_every_space_tensorizes_and_keeps_its_weight_packed_at_compile_time(
    quantized, int8_target
):
    """In each design space of an int8 model's kernels, the copy that packs a constant weight into
    the intrinsic's tiles stays at the root (dropped when measuring, folded at compile time) and
    every sampled program is tensorized. The copy was once inlined into the tensorized GEMM in half
    the spaces, whose programs all ran scalar code instead (and won at times, on small shapes)."""
    model = (
        models.mlp(int8=True)
        if quantized == "matmul_integer"
        else models.quantized_static(models.resnet_bottleneck(size=6, channels=32, width=16))
    )
    lowered = lower_for_tuning(from_onnx(model.proto, model.input_shapes()), None, int8_target)
    checked = 0
    for task in extract_tasks(lowered, int8_target):
        func = task.dispatched[0]
        for space in (
            s for s in design_spaces(func, int8_target) if "Blockize" in schedule_steps(s)
        ):
            assert "meta_schedule.layout_rewrite_preproc" in str(space.trace), task.task_name
            for seed in (1, 2):
                sch = finished(space, func, seed=seed)
                assert "Tensorize" in schedule_steps(sch), (task.task_name, str(space.trace))
                checked += 1
    assert checked >= 8


def _operands_and_weights(lowered, kernel: str, target) -> tuple[list[list[str]], list[list[str]]]:
    """The dtypes each ``kernel`` block (``conv2d``, ``matmul``) of a lowered model's TIR functions
    reads, and beside them the weight dtype of the dot product each one's function may use: s8 for
    the byte multiply (where the lowering found the weight exact for it, in its channel order), s16
    where the CPU's exact form widens."""
    dtypes, weights = [], []
    for _, func in lowered.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            sch = tvm.s_tir.Schedule(func)
            for block in map(sch.get, sch.get_child_blocks(sch.get_sblock("root"))):
                if block.name_hint.startswith(kernel):
                    dtypes.append([str(region.source.dtype) for region in block.reads])
                    dot = kernel_dot_product(func, target)
                    weights.append(["uint8", dot.weight_dtype if dot else "int8"])
    return dtypes, weights


def test_a_qdq_model_from_quantize_static_reaches_the_dot_product_within_one_quantization_step(
    tmp_path, int8_target
):
    """ONNX Runtime's ``quantize_static`` (QDQ: every Conv between DequantizeLinears of a u8
    activation and an s8 weight): each convolution becomes a u8 x s8 dot-product kernel with the
    scales, the bias, the next quantize and the residual add fused into it, and the model's output
    is within one output quantization step of the graph run as written (ONNX Runtime, no
    fusions)."""
    model = models.quantized_static(models.resnet_bottleneck(size=6, channels=32, width=16))
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in model.proto.graph.node}
    mod = from_onnx(model.proto)
    lowered = lower_for_tuning(mod, None, int8_target)
    # 8-bit weights: stored widened where the exact dot product multiplies s16 (vpmaddwd), unless
    # a channel order makes them exact for the byte multiply; there the 3x3 convolution runs as
    # integer Winograd
    dtypes, weights = _operands_and_weights(lowered, "conv2d", int8_target)
    assert dtypes == weights
    assert len(dtypes) == (2 if HOST_DOT.widens else 3)
    names = [t.task_name for t in extract_tasks(lowered, int8_target)]
    # requantized: to bytes, or (where only a dequantize reads them) rounded in float
    requantized = r"fused_.*(conv2d|winograd_output).*_(quantize|tir_round)"
    kernels = [n for n in names if re.match(requantized, n)]
    assert len(kernels) == 3, names
    db = tune_model(
        mod, None, int8_target, str(tmp_path), 6 * len(names), num_trials_per_iter=4, seed=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every task tuned
        executable = compile_model(db, mod, None, int8_target)
    assert HOST_DOT.form in executable.mod.imports[0].inspect_source("asm")
    (got,) = run_model(executable, model.inputs)
    (expected,) = reference_outputs(model.proto, model.inputs)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.proto.graph.initializer}
    last = next(n for n in reversed(model.proto.graph.node) if n.op_type == "DequantizeLinear")
    step = float(inits[last.input[1]])
    assert np.abs(got - expected).max() <= step


def _round_trip_layers(params, dtype: str, *, returned_too=False, dequantized_with=None):
    """From ``h = x``, per layer ``h @ I``, then ``dequantize(quantize(h, s, zp), s, zp) + y`` (a
    residual block's end), each layer with its own scale and zero point (``params``);
    ``returned_too``: the last quantize is also a result; ``dequantized_with``: the dequantizes'
    (scale, zero point) instead."""
    builder = relax.BlockBuilder()
    x, y = (relax.Var(n, relax.TensorType((8, 64), "float32")) for n in "xy")
    with builder.function("main", [x, y]):
        with builder.dataflow():
            h, quantized = x, None
            for scale, zero in params:
                s, zp = relax.const(np.float32(scale)), relax.const(np.array(zero, dtype))
                product = builder.emit(relax.op.matmul(h, relax.const(np.eye(64, dtype="float32"))))
                quantized = builder.emit(relax.op.quantize(product, s, zp, out_dtype=dtype))
                dequantized = relax.op.dequantize(quantized, *(dequantized_with or (s, zp)))
                h = builder.emit(relax.op.add(dequantized, y))
            out = builder.emit_output(relax.Tuple([h, quantized]) if returned_too else h)
        builder.emit_func_output(out)
    return builder.get()


def _round_trip_reference(x: np.ndarray, y: np.ndarray, params, dtype: str):
    """What the layers compute as ONNX writes them: round half to even, saturate, in float32."""
    info, h = np.iinfo(dtype), x
    for scale, zero in params:
        s = np.float32(scale)
        q = np.clip(np.round(h / s) + zero, info.min, info.max).astype(dtype)
        h = (q.astype(np.int32) - zero).astype(np.float32) * s + y
    return h


@pytest.mark.parametrize("dtype, zeros", [("uint8", (3, 128)), ("int8", (0, -5))])
def test_a_quantize_only_its_dequantize_reads_runs_in_float_to_the_same_values(
    cpu_target, dtype, zeros
):
    """A residual block's last convolution quantizes its result and dequantizes it at once for the
    add: in float (rounded, clipped to the zero point's range) without the conversion to bytes and
    back, every value the same as the round trip gives, on ties, saturating and tiny negative
    inputs; layers of one shape with their own scales and zero points stay one task."""
    params = [(0.5, zeros[0]), (0.25, zeros[1])]
    lowered = lower_for_tuning(_round_trip_layers(params, dtype), None, cpu_target)
    names = [g.name_hint for g, _ in lowered.functions_items()]
    assert not [n for n in names if "quantize" in n], names
    (task,) = extract_tasks(lowered, cpu_target)
    assert task.weight == 2 and "round" in task.task_name, task.task_name
    ties = np.arange(-40, 40, dtype=np.float32) * 0.125  # halves of both steps
    extremes = np.array([1e4, -1e4, 300, -300, -0.1, -0.01, 0.01, np.float32(1e-30)], np.float32)
    x, y = np.random.default_rng(0).standard_normal((2, 8, 64)).astype(np.float32) * 40
    x[0], x[1, :8], y[2] = ties[:64], extremes, 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # untuned kernels, said once
        executable = compile_model(ms.database.MemoryDatabase(), lowered, None, cpu_target)
    (got,) = run_model(executable, {"x": x, "y": y})
    np.testing.assert_array_equal(got, _round_trip_reference(x, y, params, dtype))


@pytest.mark.parametrize(
    "kind, dequantized_with",
    [
        ("read by another op", None),
        ("another zero point", (np.float32(0.5), np.array(4, "uint8"))),
        ("per-channel scale", (np.full(64, 0.5, np.float32), np.array(3, "uint8"))),
    ],
)
def test_a_quantize_that_is_more_than_a_round_trip_stays_as_it_is(kind, dequantized_with):
    """A quantize whose bytes something else reads (here the result), a dequantize with another
    zero point, and a per-channel scale keep the quantize and the dequantize."""
    mod = _round_trip_layers(
        [(0.5, 3)],
        "uint8",
        returned_too=kind == "read by another op",
        dequantized_with=dequantized_with and tuple(map(relax.const, dequantized_with)),
    )
    after = quantization_round_trips(mod)
    assert not skipped_passes(after)
    bound = relax.analysis.get_var2val(after["main"]).values()
    ops = {v.op.name for v in bound if isinstance(v, relax.Call)}
    assert {"relax.quantize", "relax.dequantize"} <= ops and "relax.round" not in ops, ops


@pytest.mark.parametrize("second_scale", [0.5, 0.3], ids=["same parameters", "another scale"])
def test_a_max_pool_between_quantizes_pools_bytes(second_scale):
    """A QDQ stem: quantize, dequantize, max pool, quantize. The pool moves after the quantize (a
    positive scale keeps the order, and padding quantizes to the least byte), so it pools bytes;
    with the same parameters, the dequantize and quantize that then meet are dropped, and the pool
    reads the first quantize's bytes. Every value is what it was."""
    x = relax.Var("x", relax.TensorType((1, 6, 6, 8), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        with builder.dataflow():
            s, zp = relax.const(np.float32(0.5)), relax.const(np.array(3, "uint8"))
            q = builder.emit(relax.op.quantize(x, s, zp, out_dtype="uint8"))
            d = builder.emit(relax.op.dequantize(q, s, zp))
            pooled = relax.op.nn.max_pool2d(d, (3, 3), (2, 2), (1, 1, 1, 1), layout="NHWC")
            p = builder.emit(pooled)
            s2 = relax.const(np.float32(second_scale))
            q2 = builder.emit(relax.op.quantize(p, s2, zp, out_dtype="uint8"))
            out = builder.emit_output(builder.emit(relax.op.dequantize(q2, s2, zp)))
        builder.emit_func_output(out)
    before = builder.get()
    after = quantization_round_trips(before)
    assert not skipped_passes(after)
    calls = [
        v for v in relax.analysis.get_var2val(after["main"]).values() if isinstance(v, relax.Call)
    ]
    (pool,) = [c for c in calls if c.op.name == "relax.nn.max_pool2d"]
    assert str(pool.args[0].ty.dtype) == "uint8", after.script()
    # the second quantize reads the pool's input: with the same parameters, the first's bytes;
    # else the first's round trip, in float
    ops = [c.op.name for c in calls]
    assert [op for op in ops if "quantize" in op] == ["relax.quantize", "relax.dequantize"], ops
    assert ("relax.round" in ops) == (second_scale != 0.5), ops
    x = np.random.default_rng(0).standard_normal((1, 6, 6, 8)).astype("float32") * 8
    assert_same_outputs(before, after, x)


def test_a_pass_leaving_the_last_op_alone_runs_where_the_result_is_bound_to_a_variable():
    """A stock pipeline's module binds its result again (``gv = lv``). Relax then hands a rule
    that left ``lv``'s op alone (a pooling in a layout a transpose cannot become) the variable
    too; read as a call, that failed and skipped the whole pass."""
    x = relax.Var("x", relax.TensorType((1, 6, 6, 8), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        with builder.dataflow():
            swapped = builder.emit(relax.op.permute_dims(x, [0, 2, 1, 3]))
            pooled = builder.emit(relax.op.nn.max_pool2d(swapped, (3, 3), (2, 2), (1, 1, 1, 1)))
            out = builder.emit_output(pooled)
        builder.emit_func_output(out)
    after = channels_last_epilogues(builder.get())
    assert not skipped_passes(after) and "max_pool2d(lv" in after.script(), after.script()


@pytest.mark.parametrize("scale", [0.5, 1e38])
def test_bytes_dequantized_and_quantized_alike_are_dropped_where_that_gives_them_back(scale):
    """``quantize(dequantize(q, s, zp), s, zp)`` is ``q`` where ``(q - zp) * s`` stays finite:
    dropped. With a scale near float32's limit the product overflows and the round trip
    saturates: it stays."""
    q = relax.Var("q", relax.TensorType((1, 16), "uint8"))
    builder = relax.BlockBuilder()
    with builder.function("main", [q]):
        with builder.dataflow():
            s, zp = relax.const(np.float32(scale)), relax.const(np.array(3, "uint8"))
            d = builder.emit(relax.op.dequantize(q, s, zp))
            out = builder.emit_output(builder.emit(relax.op.quantize(d, s, zp, out_dtype="uint8")))
        builder.emit_func_output(out)
    before = builder.get()
    after = quantization_round_trips(before)
    assert not skipped_passes(after)
    q = np.arange(0, 256, 16, dtype="uint8").reshape(1, 16)
    assert_same_outputs(before, after, q)
    vm = relax.VirtualMachine(tvm.compile(after, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(q)).numpy()
    assert (scale == 0.5) == ("quantize" not in after.script()) == np.array_equal(got, q)


@pytest.mark.parametrize(
    "op", ["max_pool2d", "avg_pool2d", "mean, dims kept", "max over channels", "sum over the image"]
)
def test_transposes_move_past_poolings_and_reductions_and_cancel(op):
    """Between two channels-last int8 convolutions, the stem's max pool ran channels-first between
    two transposes, and the global average pool at the end after one. A pooling now runs in the
    layout the transpose came from and a reduction over the same axes there, so the transposes
    meet and cancel or vanish; every value is what it was."""
    x = relax.Var("x", relax.TensorType((1, 6, 6, 8), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        with builder.dataflow():
            nchw = builder.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
            if op.endswith("pool2d"):
                pool = getattr(relax.op.nn, op)
                pooled = builder.emit(pool(nchw, (3, 3), (2, 2), (1, 1, 1, 1)))
                out = relax.op.permute_dims(pooled, [0, 2, 3, 1])
            elif op == "mean, dims kept":
                kept = builder.emit(relax.op.mean(nchw, [2, 3], keepdims=True))
                out = relax.op.permute_dims(kept, [0, 2, 3, 1])
            elif op == "max over channels":
                out = relax.op.max(nchw, [1])
            else:
                out = relax.op.sum(nchw, [-1, -2])
            out = builder.emit_output(builder.emit(out))
        builder.emit_func_output(out)
    before = builder.get()
    after = channels_last_epilogues(before)
    assert not skipped_passes(after)
    assert "permute_dims" not in after.script(), after.script()
    x = np.random.default_rng(0).standard_normal((1, 6, 6, 8)).astype("float32")
    assert_same_outputs(before, after, x)


def test_a_dynamically_quantized_model_runs_u8_x_s8_matmuls_and_matches_the_exact_reference(
    cpu_target,
):
    """ONNX Runtime's ``quantize_dynamic`` (``DynamicQuantizeLinear``, whose zero point is computed
    at run time, and ``MatMulInteger`` with an s8 weight and its zero point of 0): each matmul stays
    u8 x s8 -> s32, and the model computes what ONNX's exact reference computes (ONNX Runtime's own
    kernels saturate pairs of products on CPUs without VNNI, 0.068 off on Zen 3)."""
    model = models.quantized_dynamic(models.mlp())
    assert "DynamicQuantizeLinear" in {n.op_type for n in model.proto.graph.node}
    lowered = lower_for_tuning(from_onnx(model.proto), None, cpu_target)
    # widened where the dot product multiplies s16, unless a channel order makes them exact for
    # the byte multiply
    dtypes, weights = _operands_and_weights(lowered, "matmul", cpu_target)
    assert dtypes == weights
    assert len(dtypes) == 2
    (got,) = run_model(untuned(model.proto, cpu_target), model.inputs)
    (expected,) = reference_outputs(model.proto, model.inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_tune_model_checks_an_int8_model_against_the_exact_reference_where_onnxruntime_saturates(
    tmp_path,
):
    """On a CPU without VNNI ONNX Runtime's int8 MatMulInteger saturates pairs of products, so
    ``tune-model`` checks the tuned model against the model's exact arithmetic there (and against
    ONNX Runtime, exact too, where the CPU has VNNI or AVX-VNNI)."""
    model = models.quantized_dynamic(models.mlp())
    path = tmp_path / "mlp_dynamic.onnx"
    onnx.save(model.proto, path)
    proc = ms_heron_cli(
        "tune-model", path, "--trials", 6, "--round-size", 2, "--work-dir", tmp_path / "wd"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    host = host_target()
    saturates = not (has_vnni(host) or has_avx_vnni(host))
    reference = "the exact reference" if saturates else "ONNX Runtime"
    assert f"outputs checked against {reference} on a random input: correct" in proc.stdout, (
        proc.stdout
    )
    assert ("ONNX Runtime's int8 kernels saturate" in proc.stdout) == saturates, proc.stdout


def test_a_quantized_model_is_checked_within_the_rounding_two_faithful_implementations_part_by(
    capsys,
):
    """BERT-base quantized dynamically ends 0.07 apart (2% of its range) in ONNX Runtime and in
    ONNX's exact reference: a value summed in another order crosses a quantization step, and the
    layers after it carry the step on. ``tune-model`` allows a quantized model twice that distance,
    measured on the same input, and 1% of the range otherwise; a wrong kernel is off by more."""
    rng = np.random.default_rng(0)
    reference = rng.uniform(-3.5, 3.5, 4096).astype(np.float32)

    def stepped(values, at, step):  # a few outputs a rounding step away
        out = values.copy()
        out[rng.choice(values.size, at, replace=False)] += step
        return [out]

    onnxruntime, ours = stepped(reference, 3, 0.07), stepped(reference, 5, -0.08)
    rounding = max_abs_diff(onnxruntime, [reference])
    check_outputs(ours, [reference], "the exact reference", rounding=rounding)
    assert re.search(
        r"the exact reference on a random input: correct \(within 0.14: twice ONNX Runtime's own "
        r"distance from the exact reference",
        capsys.readouterr().out,
    )
    # where the two agree (a shallow quantized model), 1% of the range, as for a float model
    check_outputs([reference], [reference], "ONNX Runtime", rounding=1e-6)
    assert capsys.readouterr().out.endswith("ONNX Runtime on a random input: correct\n")
    with pytest.raises(
        WrongResult,
        match=r"differs from the exact reference's by 0.08 \(more than 0.035: 1% of the output "
        r"range, 0.035\)",
    ):
        check_outputs(ours, [reference], "the exact reference")
    wrong = [rng.uniform(-3.5, 3.5, 4096)]  # a kernel computing something else
    with pytest.raises(
        WrongResult,
        match=r"by \d\.\d+ \(more than 0.14: twice ONNX Runtime's own distance from the exact "
        r"reference, 0.07\)",
    ):
        check_outputs(wrong, [reference], "the exact reference", rounding=rounding)


def test_dynamically_quantized_layers_of_one_shape_are_one_task_whatever_their_weight_scales(
    cpu_target,
):
    """Each layer's weight has its own scale; as a literal in the kernel it made every BERT layer's
    matmuls tasks of their own (89 tasks for BERT-base int8, 21 now)."""

    def tasks(layers):
        model = models.quantized_dynamic(
            models.bert(layers=layers, seq=8, hidden=32, heads=2, ffn=64)
        )
        return extract_tasks(lower_for_tuning(from_onnx(model.proto), None, cpu_target), cpu_target)

    one, two = tasks(1), tasks(2)
    assert sum("matmul" in t.task_name for t in one) >= 4, [t.task_name for t in one]
    assert sorted(t.weight for t in two) == sorted(2 * t.weight for t in one), [
        t.task_name for t in two
    ]


def _model_work_dir_reports_shows_and_resumes(work_dir, path):
    """A model's work dir is a run like an operator's: report, show TASK, resume, refuse another
    model."""
    report = ms_heron_cli("report", work_dir)
    assert report.returncode == 0, report.stderr[-3000:]
    text = (work_dir / "report.md").read_text()
    assert re.search(r"\| estimated model latency \| [\d.]+ ms \|", text), text
    tasks = re.findall(r"^\| (\w+) \| [\d.]+ \|", text.split("## Tasks")[1], flags=re.M)
    assert len(tasks) == 3 and (work_dir / "tuning_curve.png").stat().st_size > 0
    held = len((work_dir / "database_tuning_record.json").read_text().splitlines())
    # task, calls, bound, ms, share, trials
    row = r"^\| \w+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+% \| (\d+) \|"
    trials = re.findall(row, text.split("## Tasks")[1], flags=re.M)
    # each task's trials, all records counted
    assert len(trials) == 3 and sum(map(int, trials)) == held, text

    unnamed = ms_heron_cli("show", work_dir)
    assert unnamed.returncode == 2 and f"name a task of model {path.name}: " in unnamed.stderr
    shown = ms_heron_cli("show", work_dir, tasks[0])
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert (
        f"# best schedule of task {tasks[0]} of model {path.name}" in shown.stdout
        and "T.prim_func" in shown.stdout
    )

    again = ms_heron_cli(
        "tune-model", path, "--trials", held + 4, "--round-size", 4, "--work-dir", work_dir
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {held} records" in again.stdout
    assert len((work_dir / "database_tuning_record.json").read_text().splitlines()) >= held + 4
    rounds = [json.loads(line) for line in (work_dir / "progress.jsonl").read_text().splitlines()]
    assert (
        rounds[-2]["trials"] >= held + 4
        and rounds[-2]["task"] in tasks
        and rounds[-2]["best_seconds"] < math.inf
    )
    # the last line: every task's best kernel timed again, the estimate from those times
    run = TuningRun.open(work_dir)
    times = run.task_times()
    assert rounds[-1]["confirmed"] and all(t.confirmed for t in times), times
    assert rounds[-1]["best_seconds"] == pytest.approx(sum(t.calls * t.seconds for t in times))
    confirmed = confirmed_seconds(work_dir)
    assert {t.seconds for t in times} <= set(confirmed.values()) and len(confirmed) >= len(tasks)

    other = path.with_name("other.onnx")
    onnx.save(models.mlp(int8=False).proto, other)
    refused = ms_heron_cli("tune-model", other, "--work-dir", work_dir)
    assert (
        refused.returncode == 2
        and f"holds a run of model {path.name}, not model other.onnx" in refused.stderr
    )


def _matmul_model(nodes, x_shape, extra_inputs=()):
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape), *extra_inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_onnx_input_needs_a_static_shape():
    model = _matmul_model([helper.make_node("MatMul", ["x", "w"], ["y"])], ["batch", 4])
    with pytest.raises(ModelError, match=r"input 'x' .* dynamic shape .*--input-shape x:"):
        from_onnx(model)
    mod = from_onnx(model, {"x": (3, 4)})  # the fix the message names
    assert [int(d) for d in mod["main"].params[0].ty.shape.values] == [3, 4]


def test_onnx_operator_relax_cannot_import_is_named():
    model = _matmul_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["t"]),
            helper.make_node("Einsum", ["t"], ["y"], equation="ij->ji"),
        ],
        [2, 4],
    )
    model.graph.node[1].op_type = "NoSuchOperator"
    with pytest.raises(ModelError, match="NoSuchOperator.*Relax cannot import"):
        from_onnx(model)


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.onnx"], "no ONNX model at missing.onnx"),
        (["{model}", "--input-shape", "x=2,4"], "--input-shape takes NAME:DIMS"),
        (["{model}", "--input-shape", "y:2,4"], "names y, but the model's inputs are x"),
    ],
)
def test_tune_model_rejects_bad_input_in_one_line(tmp_path, args, message):
    path = tmp_path / "m.onnx"
    onnx.save(_matmul_model([helper.make_node("MatMul", ["x", "w"], ["y"])], ["batch", 4]), path)
    proc = ms_heron_cli(
        "tune-model", *[a.format(model=path) for a in args], timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_model_lowering_approximates_exp_and_erf_unless_exact_math_is_asked(cpu_target, tmp_path):
    """GELU's erf and softmax's exp become TVM's vectorizable approximations by default; the model
    still matches ONNX Runtime closely, and ``exact_math`` keeps the libm calls (other tasks)."""
    model = models.bert_layer(seq=8, hidden=32, heads=2, ffn=64)
    mod = from_onnx(model.proto, model.input_shapes())
    names = {
        exact: " ".join(
            t.task_name
            for t in extract_tasks(
                lower_for_tuning(mod, None, cpu_target, exact_math=exact), cpu_target
            )
        )
        for exact in (False, True)
    }
    assert "fast_erf" in names[False] and "fast_softmax" in names[False]
    assert "fast_" not in names[True] and "_erf" in names[True] and "softmax" in names[True]

    expected, _ = onnxruntime_model(model.proto, model.inputs, threads=1)
    for exact in (False, True):
        with pytest.warns(UserWarning, match="no tuned schedule"):
            executable = compile_model(
                ms.database.MemoryDatabase(), mod, None, cpu_target, exact_math=exact
            )
        got = run_model(executable, model.inputs)
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)

    path = tmp_path / "bert.onnx"
    onnx.save(model.proto, path)
    run_file = (
        TuningRun.create(tmp_path / "wd", RunSpec.of_model(path, {}, cpu_target, 0)).work_dir
        / "ms_heron_run.json"
    )
    old = {k: v for k, v in json.loads(run_file.read_text()).items() if k != "exact_math"}
    run_file.write_text(json.dumps(old))  # a run file from before the option: tuned with exact math
    assert (
        TuningRun.open(tmp_path / "wd").spec.exact_math
        and "(exact math)" in TuningRun.open(tmp_path / "wd").spec.describe()
    )


def test_a_relax_module_is_a_run_with_resume_report_and_show(tmp_path, cpu_target):
    """A Relax module tuned through TuningRun keeps itself in the work dir: reopened from the work
    dir alone it resumes, reports and shows a task's schedule; another module is refused."""

    class Tiny(nn.Module):
        def __init__(self, features):
            self.dense = nn.Linear(16, features)

        def forward(self, x):
            return nn.relu(self.dense(x))

    def exported(features):
        mod, named = Tiny(features).export_tvm(
            spec={"forward": {"x": nn.spec.Tensor((8, 16), "float32")}}
        )
        rng = np.random.default_rng(0)
        return mod, {
            name: rng.standard_normal([int(d) for d in p.shape]).astype("float32")
            for name, p in named
        }

    work = tmp_path / "run"
    TuningRun.create(work, RunSpec.of_relax(*exported(32), work, cpu_target, 0, label="tiny")).tune(
        3, num_trials_per_iter=3
    )
    run = TuningRun.open(work)
    assert run.spec.describe() == "model tiny" and run.state().trials == 3
    assert run.tune(5, num_trials_per_iter=2).trials == 5
    task = max(run.task_times(), key=lambda t: t.seconds).name
    assert run.best_schedule(task).trace is not None
    report = ms_heron_cli("report", work)
    assert report.returncode == 0 and "estimated model latency" in report.stdout, report.stderr[
        -2000:
    ]
    with pytest.raises(RunError, match="holds a run of model tiny"):
        TuningRun.create(work, RunSpec.of_relax(*exported(48), work, cpu_target, 0, label="wider"))


# -- what ONNX Runtime's graph optimizer does, at import
# --------------------------------------------


def _untuned_against_onnxruntime(model, cpu_target, atol=1e-4):
    """The model compiled without tuning records: its output against ONNX Runtime's on the same
    file."""
    (got,) = run_model(untuned(model.proto, cpu_target), model.inputs)
    (expected,), _ = onnxruntime_model(model.proto, model.inputs, threads=1)
    np.testing.assert_allclose(got, expected, rtol=atol, atol=atol)


def test_a_resnet_lowers_to_one_kernel_per_convolution_with_batch_norm_folded_and_no_stack(
    cpu_target,
):
    """Conv + BatchNorm + residual ``Sum`` + ReLU: the BatchNorm is folded into the weights and bias
    (no subtract / divide left), the Sum is an add (no stack), and the add and ReLU run in the
    kernel that writes the convolution's output (its own, or a Winograd convolution's output
    transform), so the tasks are one per convolution plus pooling, the classifier and the Winograd
    convolutions' input transforms and GEMMs; the compiled model matches ONNX Runtime."""
    model = models.resnet50(size=32, width=8, blocks=(1, 2, 1, 1), classes=10)
    graph = model.proto.graph
    convs = sum(n.op_type == "Conv" for n in graph.node)
    assert {"BatchNormalization", "Sum"} <= {n.op_type for n in graph.node}
    tasks = extract_tasks(lower_for_tuning(from_onnx(model.proto), None, cpu_target), cpu_target)
    names = [t.task_name for t in tasks]
    kernels = [t for t in tasks if re.match(r"fused_(conv2d|winograd_output|matmul)", t.task_name)]
    assert sum(int(t.weight) for t in kernels) == convs + 1  # + the classifier's Gemm
    assert not any(re.search("stack|subtract|divide|batch_norm", n) for n in names), names
    others = sorted(set(names) - {t.task_name for t in kernels})
    # the input's and the output's transposes (channels-last convolutions), the last with the
    # classifier's flatten; the one 3x3 stride-1 convolution with 16 channels or more is Winograd's
    # (its input transform and GEMM)
    assert [re.sub(r"\d+$", "", n) for n in others] == [
        "fused_transpose1_reshape",
        "matmul",
        "max_pool2d",
        "mean",
        "transpose",
        "winograd_input",
    ], others
    assert sum(int(t.weight) for t in kernels if "relu" in t.task_name) == sum(
        n.op_type == "Relu" for n in graph.node
    )
    _untuned_against_onnxruntime(model, cpu_target)


def _flattened_linears() -> onnx.ModelProto:
    """Two ``torch.nn.Linear`` on a 3-D input as exporters write them (a flattening ``Reshape``, a
    2-D ``MatMul``, a ``Reshape`` back): the first with a bias and a per-channel scale after it, the
    second with GPT-2's tanh GELU (``Pow(y, 3)``, ``y`` read three times) and a residual add."""
    rng = np.random.default_rng(0)
    consts = {
        "w1": rng.standard_normal((8, 16)),
        "w2": rng.standard_normal((16, 16)) / 4,
        "bias": rng.standard_normal(16),
        "scale": rng.uniform(0.5, 2, 16),
        "flat": np.array([-1, 16]),
        "batched": np.array([1, 4, 16]),
        "rows": np.array([-1, 8]),
        "three": np.array(3.0),
        "cube": np.array(0.044715),
        "root": np.array(0.7978845608),
        "half": np.array(0.5),
        "one": np.array(1.0),
    }
    nodes = [
        ("Reshape", ["x", "rows"], "x2"),
        ("MatMul", ["x2", "w1"], "m1"),
        ("Reshape", ["m1", "batched"], "m1b"),
        ("Add", ["m1b", "bias"], "biased"),
        ("Mul", ["biased", "scale"], "h"),
        ("Reshape", ["h", "flat"], "h2"),
        ("MatMul", ["h2", "w2"], "m2"),
        ("Reshape", ["m2", "batched"], "g"),
        ("Pow", ["g", "three"], "g3"),
        ("Mul", ["g3", "cube"], "g3c"),
        ("Add", ["g", "g3c"], "inner"),
        ("Mul", ["inner", "root"], "scaled"),
        ("Tanh", ["scaled"], "t"),
        ("Add", ["t", "one"], "t1"),
        ("Mul", ["g", "half"], "gh"),
        ("Mul", ["gh", "t1"], "gelu"),
        ("Add", ["gelu", "h"], "y"),
    ]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, [out]) for op, inputs, out in nodes],
        "flattened_linears",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4, 16))],
        [
            onnx.numpy_helper.from_array(
                v.astype(np.int64 if v.dtype.kind == "i" else np.float32), k
            )
            for k, v in consts.items()
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_flattened_linears_bias_scale_gelu_and_residual_run_in_its_matmul_kernel(cpu_target):
    """The reshape back after a flattened matmul moves past the element-wise ops after it, which
    then fuse into the matmul's kernel: the bias, and the scale folded through it into the weight
    (no multiply left in that kernel); GELU's cube as products (no ``pow``) and the residual add.
    The second matmul's result, read three times, is computed once (its 0.5 not folded into a
    copy of its weight). Two kernels in all (besides the reshapes of the model's input and
    output), and the model matches ONNX Runtime."""
    model = _flattened_linears()
    calls = kernel_calls(lower_for_tuning(from_onnx(model), None, cpu_target))
    calls = [c for c in calls if not re.fullmatch(r"reshape\d*", c)]  # the input's and output's
    assert len(calls) == 2 and all(c.startswith("fused_matmul") for c in calls), calls
    assert "multiply" not in calls[0] and "power" not in calls[1], calls
    assert all(op in calls[1] for op in ("tanh", "multiply", "add")), calls
    x = np.random.default_rng(1).standard_normal((1, 4, 8)).astype("float32")
    (got,) = run_model(untuned(model, cpu_target), {"x": x})
    (expected,), _ = onnxruntime_model(model, {"x": x}, threads=1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_relu6_as_clip_fuses_into_the_depthwise_and_pointwise_convolutions(cpu_target):
    """MobileNetV2's ``Clip(0, 6)``: TVM's importer emits two TIR calls FuseOps cannot merge;
    imported as ``relax.op.clip`` it joins the convolution's kernel before it, depthwise and 1x1
    alike."""
    model = models.mobilenet_v2(size=32, stages=((1, 16, 1, 1), (6, 24, 2, 2)), last=64, classes=10)
    names = [
        t.task_name
        for t in extract_tasks(
            lower_for_tuning(from_onnx(model.proto), None, cpu_target), cpu_target
        )
    ]
    assert not any(re.match(r"(tir_clip|maximum|minimum|clip)", n) for n in names), names
    assert sum("clip" in n for n in names) >= 4 and any(
        re.match(r"fused_conv2d\d*_add\d*_tir_clip", n) for n in names
    )
    _untuned_against_onnxruntime(model, cpu_target)
