"""The x86 dot-product intrinsics: each is chosen from the target's features, tensorizes, emits its
instruction and is bit-exact, adversarial inputs included; TVM's repaired VNNI name builds too.

Each runs where the host executes its instruction (a kernel compiled for a narrower CPU runs on a
wider one: ``haswell`` anywhere here) and is compiled, not run, elsewhere; a skip names the CPU."""

import json
import re
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
import tvm
import tvm_ffi
from conftest import assert_same_outputs, ms_heron_cli, op_bindings
from rule_helpers import allocations, block_names, finished, stock_design_spaces
from tvm import relax
from tvm.s_tir import Schedule, TensorIntrin
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.analysis import estimate_tir_flops
from tvm.target import Target

from ms_heron import HeronSearch, HeronSpace, workloads
from ms_heron.constraints import Solver, derive, replay
from ms_heron.hardware.dot_products import (
    DOT_PRODUCTS,
    NARROW_WEIGHT,
    NARROW_WEIGHTS,
    VNNI,
    bytes_multiply_exactly,
    dot_product,
    dot_products,
    kernel_dot_product,
    narrow_dot_product,
    narrow_weight_params,
    narrowing_order,
    native_dtype,
    require_dot_product,
)
from ms_heron.hardware.peak import (
    bound_parts,
    dot_chains,
    dot_peak_gops,
    fma_peak_gops,
    unit_peak,
)
from ms_heron.hardware.probes import PEAK_CHAINS, dot_kernel
from ms_heron.hardware.targets import (
    ISA_MCPU,
    TargetError,
    cpu_name,
    host_target,
    narrowed,
    runs_here,
    target_json,
)
from ms_heron.intrinsics import TVM_VNNI_INTRIN, ensure_registered
from ms_heron.relax import compile_model, extract_tasks, from_onnx, lower_for_tuning, run_model
from ms_heron.relax.lowering import compile_lowered
from ms_heron.relax.passes import (
    channel_orders_into_producers,
    gathers_as_injective,
    shared_channel_orders,
)
from ms_heron.relax.passes.sinking import constant_value
from ms_heron.report.baselines import reference_outputs
from ms_heron.rules import MultiLevelTiling, Tensorize
from ms_heron.schedule.operand_layout import widen_activation
from ms_heron.schedule.register_tile import row_multiple
from ms_heron.space import default_postprocs, design_spaces
from ms_heron.testing import models
from ms_heron.testing.int8 import adversarial_inputs
from ms_heron.tuning import RunSpec, TuningRun, tune_model
from ms_heron.workloads import WorkloadError
from ms_heron.workloads.evaluate import build, run_and_check


def _mcpu(dot):
    """A CPU with the dot product's instruction set and nothing wider."""
    return ISA_MCPU[dot.isa_key]


def _target(dot):
    return Target({"kind": "llvm", "mcpu": _mcpu(dot), "num-cores": 2})


def _tensorized_dense(intrin, dot, M=32, N=64, K=32):
    lanes, red = dot.tile
    workload = workloads.gemm(M=M, N=N, K=K, dot=dot)
    sch = Schedule(workload.func)
    block = sch.get_sblock("C")
    if dot.widens:
        widen_activation(sch, block, dot.activation_dtype)
    i, j, k = sch.get_loops(block)
    j_outer, j_lane = sch.split(j, [None, lanes])
    k_outer, k_lane = sch.split(k, [None, red])
    sch.reorder(i, j_outer, k_outer, j_lane, k_lane)
    sch.decompose_reduction(block, k_outer)
    sch.tensorize(j_lane, intrin)
    return workload, sch


def _tensorized_conv(dot):
    """A padded 3x3 convolution through the Tensorize rule: its padded copy is the operand a
    widening dot product reads as s16, written so by the padding itself. The weight is marked
    narrow (``workloads.make``'s ``narrow_weights``), as the lowering records a narrow constant, for
    a form exact on such weights only."""
    workload = workloads.make(
        "c2d",
        target=_target(dot),
        narrow_weights=dot.narrow_weights,
        N=1,
        H=6,
        W=6,
        CI=32,
        CO=32,
        KH=3,
        KW=3,
        pad=1,
    )
    spaces = stock_design_spaces(workload.func, [Tensorize(), MultiLevelTiling()], _target(dot))
    space = next(s for s in spaces if dot.name in str(s.trace))
    return workload, finished(space, workload.func)


def test_a_byte_multiply_is_exact_where_no_pair_of_weights_it_sums_can_leave_s16():
    """``vpmaddubsw`` sums the products of weights 2i and 2i + 1 along the reduction: with u8 up to
    255, a pair's positive weights may sum to 128 (32640) and its negative ones to -128, whatever
    the other weights are; without the axis, every weight within +-64."""
    fits = np.array([[127, -128, 100, 100], [1, 127, 0, -128]], np.int8)  # pairs down axis 0
    assert bytes_multiply_exactly(fits, 0)
    assert not bytes_multiply_exactly(fits, 1)  # (127, -128) fits, (100, 100) does not
    assert not bytes_multiply_exactly(np.array([65, 64], np.int8), 0)  # 255 x 129 = 32895
    assert not bytes_multiply_exactly(np.array([-128, -1], np.int8), 0)
    # the odd one pairs with 0
    assert bytes_multiply_exactly(np.array([[127], [1], [-128]], np.int8), 0)
    assert not bytes_multiply_exactly(fits, None) and bytes_multiply_exactly(
        np.clip(fits, -64, 64), None
    )
    assert not bytes_multiply_exactly(fits.astype(np.int16), 0)  # stored widened: not bytes


def test_rows_whose_adjacent_pairs_saturate_are_paired_anew_where_an_order_fits():
    """Rows 0 and 1 hold 127 and 100 in one column (they saturate as packed), rows 2 and 3 hold
    -128 and -90 in another: paired across, every pair fits. Where every row holds an extreme of
    one sign, or the rows are odd in number, no order is found."""
    weight = np.zeros((4, 3), np.int8)
    weight[:, 0] = [127, 100, 0, 1]
    weight[:, 1] = [0, 0, -128, -90]
    weight[:, 2] = [50, 60, 70, -80]
    assert not bytes_multiply_exactly(weight, 0)
    order = narrowing_order(weight, 0)
    assert sorted(order.tolist()) == [0, 1, 2, 3]
    assert bytes_multiply_exactly(weight[order], 0)
    # the axis is the reduction's wherever it lies: here the same weight transposed
    np.testing.assert_array_equal(narrowing_order(weight.T.copy(), 1), order)
    assert narrowing_order(np.full((4, 3), 100, np.int8), 0) is None
    assert narrowing_order(weight[:3], 0) is None


def _matmul(weight: np.ndarray):
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, weight.shape[0]), "uint8"))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit_output(relax.op.matmul(x, relax.const(weight), out_dtype="int32"))
        builder.emit_func_output(y)
    return builder.get()


@pytest.mark.parametrize("pairs", ["fit", "fit reordered", "saturate"])
def test_the_lowering_multiplies_bytes_where_weight_pairs_fit_and_widens_where_one_saturates(
    pairs, tmp_path
):
    """A u8 x s8 matmul's constant weight, full range (127, -128, 1, 0 along K): its pairs down K
    fit s16, so an AVX2 lowering keeps it s8 and marks it narrow for ``vpmaddubsw``. With its rows
    shuffled, two 127s pair up as packed, but not in another order of K: the activation's columns
    are taken in that order, and the weight's rows with them. Transposed, every row holds a 127:
    no order fits, so it is stored widened for ``vpmaddwd``, and not marked. Each runs bit-exact
    against u8 activations of 255."""
    column = np.array([127, 1, -128, 0, 127, -128, 0, 1], np.int8)
    weight = {
        "fit": np.tile(column[:, None], (1, 8)),
        "fit reordered": np.tile(column[[0, 4, 1, 2, 3, 5, 6, 7], None], (1, 8)),
        "saturate": np.tile(column[None, :], (8, 1)),
    }[pairs]
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    mod = _matmul(weight)
    lowered = lower_for_tuning(mod, None, haswell)
    (func,) = [f for g, f in lowered.functions_items() if "matmul" in g.name_hint]
    weight_dtypes = {str(p.ty.dtype) for p in func.params} & {"int8", "int16"}
    assert weight_dtypes == ({"int16"} if pairs == "saturate" else {"int8"}), func.script()
    assert (NARROW_WEIGHTS in (func.attrs or {})) == (pairs != "saturate")
    # its bound is made from the peak of the form it may use: a narrow one's tuning stops near the
    # byte multiply's peak, not at the exact form's, which the byte multiply passes
    dot = kernel_dot_product(func, haswell)
    assert dot.form == ("vpmaddwd" if pairs == "saturate" else "vpmaddubsw")
    kernel = tvm.IRModule({"main": func})
    compute_s, _ = bound_parts(kernel, haswell)
    assert compute_s == pytest.approx(
        estimate_tir_flops(kernel) / (dot_peak_gops(haswell, dot) * 1e9)
    )
    takes = [g.name_hint for g, _ in lowered.functions_items() if "take" in g.name_hint]
    assert bool(takes) == (pairs == "fit reordered"), takes
    tasks = extract_tasks(lowered, haswell)
    db = tune_model(mod, None, haswell, str(tmp_path), 2 * len(tasks), num_trials_per_iter=2)
    executable = compile_model(db, mod, None, haswell)
    asm = executable.mod.imports[0].inspect_source("asm")
    assert ("vpmaddubsw" in asm) == (pairs != "saturate")
    x = np.full((4, 8), 255, np.uint8)
    (got,) = run_model(executable, {"x": x})
    np.testing.assert_array_equal(got, x.astype(np.int32) @ weight.astype(np.int32))


def test_a_channel_order_moves_into_the_weight_of_the_kernel_producing_what_only_it_reads():
    """``take(relu(x @ w + b), order)`` becomes ``relu(x @ w[:, order] + b[order])``: no copy. The
    same order of a tensor that the output reads too stays a take (reordering the tensor in
    place would change the output). Both compute what they computed."""
    rng = np.random.default_rng(0)
    order = relax.const(np.array([3, 0, 2, 1, 7, 5, 6, 4], np.int32))
    weights = [relax.const(rng.standard_normal((8, 8)).astype("float32")) for _ in range(2)]
    bias = relax.const(rng.standard_normal(8).astype("float32"))
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 8), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            hidden = builder.emit(relax.op.matmul(x, weights[0]))
            read_once = builder.emit(relax.op.nn.relu(relax.op.add(hidden, bias)))
            reordered = builder.emit(relax.op.take(read_once, order, axis=1))
            shared = builder.emit(relax.op.matmul(x, weights[1]))
            kept = builder.emit(relax.op.take(shared, order, axis=1))
            out = builder.emit_output(relax.Tuple([reordered, kept, shared]))
        builder.emit_func_output(out)
    before = builder.get()
    after = channel_orders_into_producers(before)
    assert len(re.findall(r"R\.take\(", after.script())) == 1, after.script()
    assert_same_outputs(before, after, rng.standard_normal((2, 8)).astype("float32"))


def _stream(returned: bool) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """A u8 x s8 convolution writes a quantized tensor (NHWC, 8 channels) that two others read,
    each of whose weights saturates ``vpmaddubsw`` as packed and wants another order: the first
    pairs two 127s in channels 0 and 1, the second two 127s in 2 and 3 and two -128s in 4 and 5.
    ``returned``: the function's result holds the tensor too."""
    first = np.array([127, 127, 1, -128, 0, -128, 0, 1], np.int8)
    second = np.array([0, 1, 127, 127, -128, -128, 1, 0], np.int8)
    rng = np.random.default_rng(0)
    weights = [
        rng.integers(-128, 128, (8, 1, 1, 8)).astype(np.int8),
        np.tile(first, (8, 1)).reshape(8, 1, 1, 8),
        np.tile(second, (8, 1)).reshape(8, 1, 1, 8),
    ]
    scale = rng.uniform(1e-4, 1e-3, 8).astype("float32")
    conv = dict(data_layout="NHWC", kernel_layout="OHWI", out_dtype="int32")
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 4, 8), "uint8"))
    with builder.function("main", [x]):
        with builder.dataflow():
            written = builder.emit(relax.op.nn.conv2d(x, relax.const(weights[0]), **conv))
            scaled = relax.op.multiply(relax.op.astype(written, "float32"), relax.const(scale))
            stream = builder.emit(
                relax.op.quantize(scaled, relax.const(0.05), relax.const(3, "int8"), -1, "uint8")
            )
            reads = [
                builder.emit(relax.op.nn.conv2d(stream, relax.const(w), **conv))
                for w in weights[1:]
            ]
            out = builder.emit_output(relax.Tuple([*reads, stream] if returned else reads))
        builder.emit_func_output(out)
    return builder.get(), weights


@pytest.mark.parametrize("returned", [False, True], ids=["read by convolutions", "returned"])
def test_a_tensor_several_convolutions_read_is_computed_in_one_order_that_fits_them_all(returned):
    """Each reader wants its own order of the tensor's channels (a take each, as a residual stream
    had): one order fits both, so the convolution that writes the tensor permutes its output
    channels, the per-channel scale on the way is permuted alike, and both readers' weights are
    stored in that order, every pair within s16; the model computes what it computed. A tensor the
    function returns keeps its order (the caller reads it): its readers share one copy in that
    order instead. Nothing changes on a VNNI CPU, whose dot product is exact on any weight."""
    before, weights = _stream(returned)
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    for widens in (False, True):
        cpu = haswell if widens else Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
        with cpu:
            after = shared_channel_orders(before)
        assert tvm_ffi.structural_equal(after, before) == (not widens)
    convs, takes = op_bindings(after, "relax.nn.conv2d"), op_bindings(after, "relax.take")
    stored = [constant_value(b.value.args[1]) for b in convs]
    if returned:
        (copy,) = takes
        assert all(b.value.args[0].same_as(copy.var) for b in convs[1:])
        np.testing.assert_array_equal(stored[0], weights[0])
        order = constant_value(copy.value.args[1])
    else:
        assert not takes
        order = [int(np.flatnonzero((stored[0] == w).all(axis=(1, 2, 3)))[0]) for w in weights[0]]
        order = np.argsort(order)  # the written channel at each position
        np.testing.assert_array_equal(stored[0], weights[0][order])
    for got, weight in zip(stored[1:], weights[1:]):
        assert not bytes_multiply_exactly(weight, 3) and bytes_multiply_exactly(got, 3)
        np.testing.assert_array_equal(got, weight[..., order])
    inputs = np.random.default_rng(1).integers(0, 256, (1, 4, 4, 8)).astype(np.uint8)
    assert_same_outputs(before, after, inputs)


def test_matmuls_reading_one_normalized_activation_share_one_copy_that_fuses_with_its_quantize():
    """BERT's query, key and value matmuls read one quantized LayerNorm output, each weight
    saturating ``vpmaddubsw`` as packed in another pair of rows. No order passes the LayerNorm
    (nor the parameter before it), so each matmul took its own copy of the activation: 36 copy
    kernels in BERT-base. One order fits all three weights, so they share one copy, which
    lowers into the quantize's kernel; the results are the same integers. The clip beside them
    once made the pass fail on its integer bounds and skip the whole function."""
    columns = [
        [127, 127, 1, -128, 0, -128, 0, 1],
        [0, 1, 127, 127, -128, -128, 1, 0],
        [0, 0, 0, 0, 0, 0, 100, 100],
    ]
    weights = [np.tile(np.array(c, np.int8)[:, None], (1, 8)) for c in columns]
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            ones, zeros = relax.const(np.ones(8, "float32")), relax.const(np.zeros(8, "float32"))
            normalized = builder.emit(relax.op.nn.layer_norm(x, ones, zeros, axes=[-1]))
            scale, zero = relax.const(0.02), relax.const(128, "uint8")
            quantized = builder.emit(relax.op.quantize(normalized, scale, zero, -1, "uint8"))
            reads = [
                builder.emit(relax.op.matmul(quantized, relax.const(w), out_dtype="int32"))
                for w in weights
            ]
            # the residual stream, which the next op reads too: a clip, whose bounds are integer
            # literals (TVM's Constant too, though not a tensor)
            residual = builder.emit(relax.op.clip(normalized, -6, 6))
            out = builder.emit_output(relax.Tuple([*reads, residual]))
        builder.emit_func_output(out)
    before = builder.get()
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    with haswell:
        after = shared_channel_orders(before)
    (copy,) = op_bindings(after, "relax.take")
    order = constant_value(copy.value.args[1])
    for read, weight in zip(op_bindings(after, "relax.matmul"), weights):
        assert read.value.args[0].same_as(copy.var)
        got = constant_value(read.value.args[1])
        assert not bytes_multiply_exactly(weight, 0) and bytes_multiply_exactly(got, 0)
        np.testing.assert_array_equal(got, weight[order])
    assert_same_outputs(before, after, np.random.default_rng(0).standard_normal((4, 8), "float32"))
    names = [g.name_hint for g, _ in lower_for_tuning(before, None, haswell).functions_items()]
    takes = [n for n in names if "take" in n]
    assert len(takes) == 1 and "quantize" in takes[0], names


def test_each_tensor_of_a_stream_no_order_fits_gives_its_readers_one_copy():
    """A stream (an int8 matmul writes ``a``, an element-wise max makes ``b`` of it) whose four
    readers admit no common order: ``a``'s two readers share one copy in an order
    that fits both, and so do ``b``'s (before, only the first tensor's readers shared one; the
    others took a copy each)."""
    columns = [
        [0, 0, 127, 1, 127, 1, -128, -128],
        [127, 127, 127, -128, 0, 127, 1, 0],
        [0, 1, -128, -128, -128, 0, -128, 127],
        [1, 0, -128, 0, -128, -128, 127, -128],
    ]
    weights = [np.tile(np.array(c, np.int8)[:, None], (1, 8)) for c in columns]
    first = np.random.default_rng(0).integers(-128, 128, (8, 8)).astype(np.int8)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "uint8"))
    with builder.function("main", [x]):
        with builder.dataflow():
            product = relax.op.astype(relax.op.matmul(x, relax.const(first), "int32"), "float32")
            a = builder.emit(
                relax.op.quantize(
                    product, relax.const(50.0), relax.const(128, "uint8"), -1, "uint8"
                )
            )
            b = builder.emit(relax.op.maximum(a, relax.const(100, "uint8")))
            reads = [
                builder.emit(relax.op.matmul(v, relax.const(w), "int32"))
                for v, w in zip((a, a, b, b), weights)
            ]
            out = builder.emit_output(relax.Tuple(reads))
        builder.emit_func_output(out)
    before = builder.get()
    with Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2}):
        after = shared_channel_orders(before)
    takes = op_bindings(after, "relax.take")
    assert [t.value.args[0].name for t in takes] == [a.name, b.name], after.script()
    matmuls = op_bindings(after, "relax.matmul")
    np.testing.assert_array_equal(constant_value(matmuls[0].value.args[1]), first)
    for read, weight, copy in zip(matmuls[1:], weights, (0, 0, 1, 1)):
        assert read.value.args[0].same_as(takes[copy].var)
        order = constant_value(takes[copy].value.args[1])
        np.testing.assert_array_equal(constant_value(read.value.args[1]), weight[order])
        assert bytes_multiply_exactly(weight[order], 0) and not bytes_multiply_exactly(weight, 0)
    inputs = np.random.default_rng(1).integers(0, 256, (4, 8)).astype(np.uint8)
    assert_same_outputs(before, after, inputs)


@pytest.mark.parametrize("reduce", ["max", "sum"])
def test_a_dynamically_quantized_hidden_layer_is_computed_in_its_readers_order(reduce):
    """BERT's FFN: an int8 matmul writes the hidden layer, a dynamic quantization takes its range
    (max - min over every element) and the next int8 matmul reads its bytes, with a weight that
    wants another order. The range is the same in any order, so the first matmul writes the hidden
    layer in that order (its weight's columns, and the per-column constants after it, permuted):
    no copy, the same outputs. A sum over the layer in place of the max would differ in its last
    bits; there the reader takes its copy."""
    rng = np.random.default_rng(0)
    first = rng.integers(-128, 128, (8, 8)).astype(np.int8)
    second = np.tile(np.array([0, 1, 127, 127, -128, -128, 1, 0], np.int8)[:, None], (1, 8))
    scale = rng.uniform(1e-3, 1e-2, 8).astype("float32")
    bias = rng.standard_normal(8).astype("float32")
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "uint8"))
    with builder.function("main", [x]):
        with builder.dataflow():
            product = relax.op.matmul(x, relax.const(first), out_dtype="int32")
            hidden = builder.emit(
                relax.op.add(
                    relax.op.multiply(relax.op.astype(product, "float32"), relax.const(scale)),
                    relax.const(bias),
                )
            )
            extent = relax.op.subtract(getattr(relax.op, reduce)(hidden), relax.op.min(hidden))
            step = builder.emit(relax.op.divide(relax.op.maximum(extent, 1.0), relax.const(255.0)))
            quantized = builder.emit(
                relax.op.quantize(hidden, step, relax.const(128, "uint8"), -1, "uint8")
            )
            y = builder.emit_output(relax.op.matmul(quantized, relax.const(second), "int32"))
        builder.emit_func_output(y)
    before = relax.transform.Normalize()(builder.get())
    with Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2}):
        after = shared_channel_orders(before)
    writer, reader = (constant_value(b.value.args[1]) for b in op_bindings(after, "relax.matmul"))
    assert bytes_multiply_exactly(reader, 0) and not bytes_multiply_exactly(second, 0)
    takes = op_bindings(after, "relax.take")
    if reduce == "max":
        assert not takes, after.script()
        order = [int(np.flatnonzero((first.T == c).all(1))[0]) for c in writer.T]
        np.testing.assert_array_equal(writer, first[:, order])
        np.testing.assert_array_equal(reader, second[order])
    else:
        assert len(takes) == 1 and np.array_equal(writer, first)
    inputs = np.random.default_rng(1).integers(0, 256, (4, 8)).astype(np.uint8)
    assert_same_outputs(before, after, inputs)


def test_a_quantized_resnets_residual_streams_each_take_one_channel_order_and_no_copy():
    """A QDQ ResNet (two stages of two bottlenecks, quantized by ONNX Runtime with 8-bit weights)
    lowered for AVX2: each residual stream -- written by the stem and max pool, by the
    downsampling convolutions and by every block's last convolution through the residual adds and
    ReLUs, read by the next blocks' first convolutions -- is computed in one order that every
    reader's weight multiplies as bytes in. Without it, the streams ran two copy kernels. No copy
    remains; every convolution multiplies bytes but one whose weight no order fits, which widens
    to s16; and the model, compiled untuned, is within one quantization step of the graph run as
    written."""
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    model = models.quantized_static(
        models.resnet50(size=32, width=8, blocks=(2, 2), classes=10), reduce_range=False
    )
    lowered = lower_for_tuning(from_onnx(model.proto), None, haswell)
    names = [g.name_hint for g, _ in lowered.functions_items()]
    assert not [n for n in names if "take" in n], names
    convs = [f for g, f in lowered.functions_items() if "conv2d" in g.name_hint]
    narrow = [f for f in convs if NARROW_WEIGHTS in (f.attrs or {})]
    widened = [f for f in convs if "int16" in {str(p.ty.dtype) for p in f.params}]
    assert len(narrow) >= 10 and len(narrow) + len(widened) == len(convs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # untuned kernels, said once
        executable = compile_lowered(ms.database.MemoryDatabase(), lowered, haswell)
    (got,) = run_model(executable, model.inputs)
    (expected,) = reference_outputs(model.proto, model.inputs)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.proto.graph.initializer}
    last = next(n for n in reversed(model.proto.graph.node) if n.op_type == "DequantizeLinear")
    assert np.abs(got - expected).max() <= float(inits[last.input[1]])


def test_a_channel_order_that_stays_a_copy_fuses_with_the_element_wise_op_before_it():
    """The activation of a reordered matmul is a cast the copy alone reads: the two are one
    kernel, not a cast writing the activation and a copy reading it again (TVM's pattern analysis
    calls a gather opaque; :func:`gathers_as_injective` marks one at constant indices
    injective). A gather at run-time indices is left as it was."""
    column = np.array([127, 127, 1, -128, 0, -128, 0, 1], np.int8)
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            activation = builder.emit(relax.op.astype(relax.op.clip(x, 0, 255), "uint8"))
            weight = relax.const(np.tile(column[:, None], (1, 8)))
            y = builder.emit_output(relax.op.matmul(activation, weight, out_dtype="int32"))
        builder.emit_func_output(y)
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    names = [
        g.name_hint for g, _ in lower_for_tuning(builder.get(), None, haswell).functions_items()
    ]
    (copy,) = [n for n in names if "take" in n]
    assert "cast" in copy and "clip" in copy, names
    # a gather at run-time indices (an embedding lookup) stays as TVM marks it
    builder = relax.BlockBuilder()
    table = relax.Var("table", relax.TensorType((16, 8), "float32"))
    ids = relax.Var("ids", relax.TensorType((4,), "int32"))
    with builder.function("main", [table, ids]):
        with builder.dataflow():
            rows = builder.emit_output(relax.op.take(table, ids, axis=0))
        builder.emit_func_output(rows)
    legalized = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(builder.get()))
    (lookup,) = [
        f
        for _, f in gathers_as_injective(legalized).functions_items()
        if "op_pattern" in (f.attrs or {})
    ]
    assert int(lookup.attrs["op_pattern"]) != 2, lookup.script()


def test_each_cpu_gets_its_best_dot_product_from_its_llvm_features():
    for dot in (d for d in DOT_PRODUCTS if not d.narrow_weights):
        assert dot_product(_target(dot)) == dot
    assert dot_product(Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})) == VNNI
    assert dot_product(Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})).isa == "AVX2"
    assert dot_product(Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 2})) is None
    # int8 is every one's native form: 2-4 products per lane per instruction
    for dot in DOT_PRODUCTS:
        assert native_dtype(_target(dot)) == "int8"


def test_without_vnni_the_byte_multiply_for_narrow_weights_comes_first():
    names = [
        d.name for d in dot_products(Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2}))
    ]
    # and last, its form for s16 values (an int8 convolution's Winograd GEMM)
    assert names == [
        "ms_heron_dot_8x4_avx2_7bit",
        "ms_heron_dot_8x2_avx2",
        "ms_heron_dot_8x2_avx2_s16",
    ]
    assert dot_products(Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})) == [VNNI]


def test_a_cpu_without_avx2_is_refused_naming_it():
    with pytest.raises(TargetError, match="'x86-64' has none; use an mcpu such as 'haswell'"):
        require_dot_product(Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 2}))


@pytest.mark.parametrize("kernel", ["gemm", "conv"])
@pytest.mark.parametrize("dot", DOT_PRODUCTS, ids=lambda d: d.name)
def test_every_dot_product_tensorizes_a_gemm_and_a_conv_emits_its_instruction_and_is_bit_exact(
    dot, kernel
):
    ensure_registered()
    target = _target(dot)
    workload, sch = _tensorized_dense(dot.name, dot) if kernel == "gemm" else _tensorized_conv(dot)
    lib = build(sch.mod, target)
    asm = lib.mod.inspect_source("asm")
    assert dot.form in asm
    # the saturating byte multiply: narrow weights only
    assert ("vpmaddubsw" in asm) == dot.narrow_weights
    if not dot.runs_on(host_target()):
        pytest.skip(
            f"compiled for {_mcpu(dot)}; the host CPU ({cpu_name(host_target())}) has no "
            f"{dot.isa} to run it"
        )
    for seed in range(3):
        run_and_check(lib, workload, inputs=adversarial_inputs(workload, seed, dot))


def _register_tile(model, values, width: int) -> tuple[int, int]:
    """A tensorized GEMM's micro-tile, ``(rows, weight vectors)``, in the model's ``values``."""
    full = model.evaluate(values)
    return full["register_tile[C_o].rows"], -(-full["register_tile[C_o].lane_bytes"] // width)


def test_avx_vnni_pads_a_gemms_rows_for_a_register_tile_that_keeps_both_ports_busy():
    """``vpdpbusd`` keeps both ports busy only with latency x ports accumulators (10 on an Emerald
    Rapids; 10 assumed for a CPU that is not the host). On AVX-VNNI's 16 ``ymm`` registers, a
    128-row GEMM's power-of-two tiles hold 8 at most (4 x 2; 8 x 2 spills): Tensorize adds a space
    with the rows padded to 132, 66 for each of 2 cores. Its analytical choice is a 6 x 2 tile,
    every sample holds enough accumulators, and the kernel is bit-exact on adversarial inputs (where
    the host runs AVX-VNNI). AVX-512's 32 registers hold an 8 x 2 tile without padding; a 3x3
    convolution's rows are not padded (its input would be copied once per kernel tap)."""
    dot = next(d for d in DOT_PRODUCTS if d.isa == "AVX-VNNI")
    target = _target(dot)
    chains = dot_chains(target, dot)
    assert 2 <= chains <= PEAK_CHAINS
    tile = dict(registers=16, chains=10, cores=2)
    assert row_multiple([128], 8, **tile) == 12
    assert row_multiple([1024], 128, **tile) == 24  # 1032: 2 outer tiles a core
    assert row_multiple([128], 8, **{**tile, "registers": 32}) is None
    assert row_multiple([28], 8, **tile) == 10  # 30 rows, 5 x 2 tiles (36 for 6 x 2: 29% more)
    assert row_multiple([7], 8, **tile) is None  # 10 rows: 43% more work
    workload = workloads.gemm(M=128, N=64, K=64, dot=dot)
    spaces = design_spaces(workload.func, target, HeronSpace(include_default_spaces=False))
    padded = [s for s in spaces if "A_pad" in block_names(s)]
    if chains <= 8:
        assert not padded, f"{cpu_name(target)}: 4 x 2 holds {chains} accumulators"
        return
    assert padded
    for index, space in enumerate(padded):
        assert allocations(space.mod)["A_pad"] == 132 * 64
        model = derive(space, target)
        analytical = Solver(model, seed=0).analytical()
        assert {_register_tile(model, v, 32) for v in analytical.values()} == {(6, 2)}
        for values in Solver(model, seed=index).samples(20):
            rows, vectors = _register_tile(model, values, 32)
            assert rows * vectors >= min(chains, 12), values
    conv = workloads.c2d(N=1, H=4, W=56, CI=32, CO=64, KH=3, KW=3, pad=1, dot=dot)
    for other in design_spaces(conv.func, target, HeronSpace(include_default_spaces=False)):
        assert "PadEinsum" not in [inst.kind.name for inst in other.trace.insts]
    trace = space.trace.simplified(remove_postproc=True)
    sch = replay(model, trace, workload.func, next(iter(analytical.values())))
    assert all(p.apply(sch) for p in default_postprocs())
    lib = build(sch.mod, target)
    assert "vpdpbusd" in lib.mod.inspect_source("asm")
    if not runs_here(target):
        pytest.skip(
            f"compiled for alderlake; the host CPU ({cpu_name(host_target())}) has no AVX-VNNI to "
            "run it"
        )
    for seed in range(2):
        run_and_check(lib, workload, inputs=adversarial_inputs(workload, seed, dot))


def test_tvm_vnni_name_builds_and_is_bit_exact_where_the_host_has_vnni(vnni_target):
    ensure_registered()
    workload, sch = _tensorized_dense(TVM_VNNI_INTRIN, VNNI)
    lib = build(sch.mod, vnni_target)
    assert "vpdpbusd" in lib.mod.inspect_source("asm")
    for seed in range(3):
        run_and_check(lib, workload, seed=seed)


def test_the_int8_peak_is_measured_with_the_hosts_dot_product_and_beats_fp32_where_int8_is_native(
    cpu_target,
):
    dot = dot_product(cpu_target)
    if dot is None:
        pytest.skip(f"the host CPU ({cpu_name(cpu_target)}) has no x86 dot product")
    # One core, in turn, fastest of five each: the suite's other worker holds a core at times, and a
    # probe on both cores runs at the pace of the one it shares (on a Zen 3 under the suite, int8
    # read 157 GOPS against fp32's 181, where the quiet peaks are 297 and 205)
    one_core = host_target(num_cores=1)
    int8 = fp32 = 0.0
    for _ in range(5):
        dot_peak_gops.cache_clear()
        fma_peak_gops.cache_clear()
        int8, fp32 = max(int8, dot_peak_gops(one_core)), max(fp32, fma_peak_gops(one_core))
    assert (native_dtype(cpu_target) == "int8") == (int8 > fp32), (dot.isa, int8, fp32)


def test_tvm_name_resolves_to_fixed_implementation():
    ensure_registered()
    ours = TensorIntrin.get(VNNI.name)
    tvms = TensorIntrin.get(TVM_VNNI_INTRIN)
    assert "int8x64" in tvms.impl.script() and tvms.impl.script() == ours.impl.script()
    assert np.all([d in tvms.desc.script() for d in ("uint8", "int8", "int32")])


_REPLAY = """
import json
import sys
import tvm
import ms_heron
from tvm.s_tir import meta_schedule as ms
from ms_heron import workloads

target = tvm.target.Target(json.loads(sys.argv[2]))
database = ms.database.JSONDatabase(work_dir=sys.argv[1])
sch = ms.tir_integration.compile_tir(database, workloads.gemm(M=32, N=64, K=32).func, target)
print("vpdpbusd" in tvm.compile(sch.mod, target=target).mod.inspect_source("asm"))
"""


def test_an_int8_record_compiles_with_stock_compile_tir_in_a_process_that_only_imported_ms_heron(
    tmp_path,
):
    """A tensorized record replays with no set-up call. Compiled for a VNNI CPU, not run, so any x86
    host checks it."""
    target = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    strategy = HeronSearch()
    ctx = ms.TuneContext(
        mod=workloads.gemm(M=32, N=64, K=32).func,
        target=target,
        space_generator=HeronSpace(),
        search_strategy=strategy,
        task_name="gemm",
        rand_state=0,
    )
    strategy.pre_tuning(4, 4, ctx.generate_design_space(), None, None)
    candidate = next(
        c for c in strategy.generate_measure_candidates() if VNNI.name in str(c.sch.trace)
    )
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    db.commit_tuning_record(
        ms.database.TuningRecord(
            candidate.sch.trace, db.commit_workload(ctx.mod), [1e-3], target, candidate.args_info
        )
    )
    replay = subprocess.run(
        [sys.executable, "-c", _REPLAY, str(tmp_path), json.dumps(target_json(target))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr[-2000:]
    assert replay.stdout.strip().splitlines()[-1] == "True"


def test_code_for_a_narrower_cpu_runs_here_and_a_wider_ones_does_not():
    """Haswell code (AVX2, FMA) runs on every CPU the project sees, so its peaks are measured here;
    a CPU with extensions the host lacks is refused by the probes with one line."""
    host = host_target()
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    assert runs_here(host) and runs_here(haswell)
    wider = next((d for d in DOT_PRODUCTS if not d.runs_on(host)), None)
    if wider is None:
        pytest.skip(
            f"the host CPU ({cpu_name(host)}) has every dot product: no wider CPU to refuse"
        )
    assert not runs_here(_target(wider))
    with pytest.raises(
        TargetError,
        match=r"dot_peak_gops\(\) measures this machine; code for .* does not run on it",
    ):
        dot_peak_gops(_target(wider))


def test_a_dot_products_peak_is_probed_in_code_for_its_instruction_set_alone():
    """On a CPU with AVX-512 VNNI, LLVM fuses ``vpmaddwd`` and its ``vpaddd`` into ``vpdpwssd``,
    which an AVX2 CPU lacks: a probe of the AVX2 form compiled for such a CPU measured the fused
    instruction, not what AVX2 kernels issue. Compiled only: runs on any host."""
    avx2 = next(d for d in DOT_PRODUCTS if d.isa == "AVX2" and d.form == "vpmaddwd")
    vnni_cpu = Target({"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2})
    own = avx2.own_target(vnni_cpu)
    assert own.attrs["mcpu"] == "haswell" and int(own.attrs["num-cores"]) == 2

    def assembly(target):
        return tvm.compile(dot_kernel(avx2, 1, 8), target=target).mod.inspect_source("asm")

    fused, alone = assembly(vnni_cpu), assembly(own)
    assert "vpdpwssd" in fused
    assert "vpmaddwd" in alone and "vpdpwssd" not in alone


def test_a_narrower_instruction_set_is_compiled_for_and_a_wider_one_refused_naming_the_cpu():
    host = host_target()
    avx2 = narrowed(host, "avx2")
    assert avx2.attrs["mcpu"] == "haswell" and dot_product(avx2).isa == "AVX2"
    assert int(avx2.attrs["num-cores"]) == int(host.attrs["num-cores"])
    with pytest.raises(
        TargetError, match="unknown instruction set 'sse4'; choose one of avx2, avx512bw"
    ):
        narrowed(host, "sse4")
    wider = next(
        (
            isa
            for isa, mcpu in ISA_MCPU.items()
            if not runs_here(Target({"kind": "llvm", "mcpu": mcpu}))
        ),
        None,
    )
    if wider is None:
        pytest.skip(f"the host CPU ({cpu_name(host)}) runs every instruction set: none to refuse")
    with pytest.raises(TargetError, match=rf"this CPU \(.+\) cannot run {wider} code"):
        narrowed(host, wider)


def test_tune_int8_on_a_forced_avx2_target_reports_its_share_of_the_avx2_peak(tmp_path):
    """``ms-heron tune --dtype int8`` for a Haswell target on any host: the kernel uses ``vpmaddwd``
    (the AVX2 dot product), is checked bit-exact, and the report holds it against the AVX2 peak
    measured here by a probe compiled for Haswell."""
    haswell = json.dumps({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    work = tmp_path / "wd"
    args = (
        "gemm",
        "--shape",
        "M=64",
        "N=64",
        "K=64",
        "--dtype",
        "int8",
        "--trials",
        "4",
        "--round-size",
        "4",
    )
    proc = ms_heron_cli("tune", *args, "--target", haswell, "--work-dir", work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checked against the reference: correct" in proc.stdout, proc.stdout
    show = ms_heron_cli("show", work)
    assert "ms_heron_dot_8x2_avx2" in show.stdout
    report = ms_heron_cli("report", work)
    assert report.returncode == 0, report.stderr[-3000:]
    # the share itself depends on what else runs on the host's cores (another test's kernels can
    # slow four trials' best a hundredfold): only that it is a share of this probe's peak is
    # asserted
    share = re.search(r"\| % of measured AVX2 peak \| ([\d.]+)%", (work / "report.md").read_text())
    assert share and float(share.group(1)) < 100, (work / "report.md").read_text()


def test_a_workload_with_narrow_weights_tunes_to_the_byte_multiply_and_is_exact(tmp_path):
    """``workloads.make(..., narrow_weights=True)`` for a Haswell target: 7-bit weights, packed
    for the byte multiply and recorded as narrow on the function. A run of it reopens to the same
    workload and tunes to a ``vpmaddubsw`` kernel, bit-exact on the widest pairs the form sums
    exactly. A CPU with VNNI has no narrow form and fp32 has no weights to narrow: both are refused,
    naming the fix."""
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    shape = dict(M=32, N=64, K=64)
    workload = workloads.make("gemm", "int8", target=haswell, narrow_weights=True, **shape)
    narrow = narrow_dot_product(haswell)
    assert narrow.narrow_weights and workload.tile == narrow.tile
    assert narrow_weight_params(workload.func) == {1}
    _, weight = workload.random_inputs(0)
    assert weight.dtype == np.int8 and np.abs(weight.astype(int)).max() <= NARROW_WEIGHT
    TuningRun.create(tmp_path, RunSpec.of(workload, haswell, seed=0))
    run = TuningRun.open(tmp_path)
    assert run.spec.narrow_weights and "(7-bit weights)" in run.spec.describe()
    run.tune(8, num_trials_per_iter=4)
    lib = build(run.best_schedule().mod, haswell)
    assert "vpmaddubsw" in lib.mod.inspect_source("asm")
    for seed in range(2):
        run_and_check(lib, workload, inputs=adversarial_inputs(workload, seed, narrow))
    znver4 = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    with pytest.raises(TargetError, match=r"'znver4' multiplies every s8 weight exactly .*haswell"):
        workloads.make("gemm", "int8", target=znver4, narrow_weights=True, **shape)
    with pytest.raises(WorkloadError, match="narrow weights are an int8 form .* dtype 'int8'"):
        workloads.make("gemm", "fp32", target=haswell, narrow_weights=True, **shape)


def test_a_peak_measured_anew_leaves_the_processs_first_measurement_in_place():
    """Bounds and reports keep each unit's first peak in a process; a benchmark that times the
    peak in turn with its kernels measures it anew each round, and that leaves the first one as
    it was."""
    target = narrowed(host_target(), "avx2")
    dot = dot_product(target)
    try:
        dot_peak_gops.assume(target, 1.0, dot)
        fma_peak_gops.assume(target, 1.0)
        assert unit_peak(target, "int8") == ("AVX2", 1.0)
        assert unit_peak(target, "fp32") == ("FMA", 1.0)
        unit, anew = unit_peak(target, "int8", anew=True)
        assert unit == "AVX2" and anew > 10, anew  # a real core's GOPS
        assert unit_peak(target, "fp32", anew=True)[1] > 10
        assert unit_peak(target, "int8") == ("AVX2", 1.0)
    finally:
        dot_peak_gops.cache_clear()
        fma_peak_gops.cache_clear()


@pytest.mark.parametrize("reduce_range", [True, False], ids=["7-bit weights", "8-bit weights"])
def test_narrow_weights_get_the_byte_multiply_and_full_range_ones_the_exact_form(
    reduce_range, tmp_path
):
    """A QDQ model quantized with ONNX Runtime's ``reduce_range`` (7-bit weights) is tuned for an
    AVX2 CPU: its convolutions multiply bytes (``vpmaddubsw``, which cannot saturate on such
    weights). With 8-bit weights, whose pairs could, the two 1x1 convolutions pair their input
    channels anew and still multiply bytes: the first reads the block's input, which the residual
    add reads too, through a copy in its order; the last's order moves into the weight of the 3x3
    convolution before it. That one finds no order and widens to s16 (``vpmaddwd``, as integer
    Winograd: tests/test_integer_winograd.py). Either way the model is within one quantization
    step of the graph run as written."""
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    model = models.quantized_static(
        models.resnet_bottleneck(size=6, channels=32, width=32), reduce_range=reduce_range
    )
    mod = from_onnx(model.proto)
    lowered = lower_for_tuning(mod, None, haswell)
    names = [g.name_hint for g, _ in lowered.functions_items()]
    convs = [
        f
        for g, f in lowered.functions_items()
        if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in g.name_hint
    ]
    assert all(NARROW_WEIGHTS in (f.attrs or {}) for f in convs)
    assert not any("int16" in str(p.ty.dtype) for f in convs for p in f.params)
    takes = [n for n in names if "take" in n]
    winograd = [n for n in names if "winograd" in n]
    if reduce_range:
        assert len(convs) == 3 and not takes and not winograd, names
    else:
        assert len(convs) == 2 and len(takes) == 1 and winograd, names
    # on a VNNI CPU they stay s8, in their order
    znver4 = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    vnni = lower_for_tuning(mod, None, znver4)
    assert not any(
        "int16" in f.script() for g, f in vnni.functions_items() if "conv2d" in g.name_hint
    )
    assert not any("take" in g.name_hint for g, _ in vnni.functions_items())
    tasks = extract_tasks(lowered, haswell)
    db = tune_model(
        mod, None, haswell, str(tmp_path), 4 * len(tasks), num_trials_per_iter=4, seed=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every task tuned
        executable = compile_model(db, mod, None, haswell)
    asm = executable.mod.imports[0].inspect_source("asm")
    assert "vpmaddubsw" in asm and "vpmaddwd" in asm
    (got,) = run_model(executable, model.inputs)
    (expected,) = reference_outputs(model.proto, model.inputs)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.proto.graph.initializer}
    last = next(n for n in reversed(model.proto.graph.node) if n.op_type == "DequantizeLinear")
    assert np.abs(got - expected).max() <= float(inits[last.input[1]])


@pytest.mark.parametrize("channels", [3, 1])
def test_an_images_channels_are_padded_to_whole_dot_product_steps_once_in_the_graph(
    channels, tmp_path
):
    """A quantized convolution reading an RGB image (3 channels) reads it with a fourth, zero
    channel, and its weight a zero row: written once by the kernel that quantizes the image, where
    the Tensorize rule would pad an im2col copy in the convolution's kernel on every run. On VNNI
    (4 deep) and on AVX2 (s16 pairs) alike. A single channel stays one: four times the work is more
    than padding may add. The padded model is within one quantization step of the graph run as
    written."""
    model = models.quantized_static(models.cnn(size=8, channels=channels, width=16))
    mod = from_onnx(model.proto)
    for mcpu in ("haswell", "znver4"):
        target = Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
        (conv,) = [
            f
            for g, f in lower_for_tuning(mod, None, target).functions_items()
            if "conv2d" in g.name_hint
        ]
        shapes = [[int(d) for d in p.ty.shape] for p in conv.params if len(p.ty.shape) == 4]
        expected = 4 if channels == 3 else 1
        assert shapes[0][-1] == shapes[1][-1] == expected, (mcpu, conv.script())
    haswell = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    tasks = extract_tasks(lower_for_tuning(mod, None, haswell), haswell)
    db = tune_model(mod, None, haswell, str(tmp_path), 2 * len(tasks), num_trials_per_iter=2)
    (got,) = run_model(compile_model(db, mod, None, haswell), model.inputs)
    (expected,) = reference_outputs(model.proto, model.inputs)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.proto.graph.initializer}
    last = next(n for n in reversed(model.proto.graph.node) if n.op_type == "DequantizeLinear")
    assert np.abs(got - expected).max() <= float(inits[last.input[1]])
