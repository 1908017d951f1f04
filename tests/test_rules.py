"""Each generation rule fires exactly when its condition holds, leaves other blocks alone, and
its design space builds and computes the right answer for randomly sampled decisions."""

import dataclasses
import math
import time

import numpy as np
import pytest
import tvm
from conftest import HOST_DOT, SMALL_SHAPES, suite
from rule_helpers import (
    allocations,
    block_names,
    check_random_samples,
    finished,
    schedule_steps,
    stock_design_spaces,
)
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.builder.local_builder import default_export
from tvm.target import Target

from ms_heron import workloads
from ms_heron.hardware.dot_products import dot_product
from ms_heron.hardware.targets import cpu_name, host_target, runs_here, vector_bytes
from ms_heron.rules import (
    AddCacheStage,
    AlwaysInline,
    BlockedTranspose,
    ComputeLocation,
    LaneReduction,
    MultiLevelSPM,
    MultiLevelTiling,
    MultiScopeSPM,
    PackOperand,
    PadExtents,
    ParallelVectorizeUnroll,
    Tensorize,
)
from ms_heron.schedule.analysis import block_realize
from ms_heron.schedule.annotations import (
    AUTO_TENSORIZE,
    CACHE_LEVEL,
    LANE_REDUCTION,
    LAYOUT_REWRITE_PREPROC,
    PACK_PANELS,
    SPM_LEVEL,
    TILING_STRUCTURE,
    TRANSPOSE_TILE,
)
from ms_heron.space import default_postprocs
from ms_heron.tuning.builder import build_candidate, local_builder
from ms_heron.workloads import Workload, from_func
from ms_heron.workloads.evaluate import build, run_and_check


def _producer_gemm_relu(relu: bool) -> Workload:
    """fp32 ``relu?((A + 1) @ W)``: an inlinable producer and (optionally) a fusible consumer."""
    M, N, K = 16, 32, 16
    a = te.placeholder((M, K), "float32", name="A")
    w = te.placeholder((K, N), "float32", name="W")
    a1 = te.compute((M, K), lambda i, k: a[i, k] + 1.0, name="A1")
    r = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a1[i, r] * w[r, j], axis=r), name="C")
    tensors = [a, w, c]
    if relu:
        tensors.append(te.compute((M, N), lambda i, j: te.max(c[i, j], 0.0), name="Relu"))
        tensors.remove(c)

    def inputs(rng):
        return [
            rng.uniform(-1, 1, (M, K)).astype("float32"),
            rng.uniform(-1, 1, (K, N)).astype("float32"),
        ]

    def reference(x, y):
        out = (x.astype(np.float64) + 1) @ y
        return np.maximum(out, 0) if relu else out

    from ms_heron.workloads.suite import _workload  # the same packaging the suite uses

    return _workload(
        "custom", "fp32", dict(M=M, N=N, K=K), tensors, 2 * M * N * K, inputs, reference
    )


def _nchw_conv_bias_relu() -> Workload:
    """fp32 ``relu(conv2d_nchw(x, w) + b)`` as a model lowers it: 6 output columns (no whole
    vector), 16 output channels, the weight and bias layout-free constants."""
    N, CI, H, W, CO = 1, 8, 6, 6, 16
    x = te.placeholder((N, CI, H, W), "float32", name="x")
    w = te.placeholder((CO, CI, 3, 3), "float32", name="w")
    b = te.placeholder((CO,), "float32", name="b")
    pad = te.compute(
        (N, CI, H + 2, W + 2),
        lambda n, c, h, v: tvm.tirx.if_then_else(
            tvm.tirx.all(h >= 1, h <= H, v >= 1, v <= W), x[n, c, h - 1, v - 1], 0.0
        ),
        name="pad",
    )
    rc, ry, rx = (
        te.reduce_axis((0, CI), "rc"),
        te.reduce_axis((0, 3), "ry"),
        te.reduce_axis((0, 3), "rx"),
    )
    conv = te.compute(
        (N, CO, H, W),
        lambda n, f, y, v: te.sum(pad[n, rc, y + ry, v + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="C",
    )
    out = te.compute(
        (N, CO, H, W), lambda n, f, y, v: te.max(conv[n, f, y, v] + b[f], 0.0), name="Relu"
    )

    def inputs(rng):
        return [
            rng.uniform(-1, 1, s).astype("float32") for s in ((N, CI, H, W), (CO, CI, 3, 3), (CO,))
        ]

    def reference(xs, ws, bs):
        padded = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        # n c h w ry rx
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        return np.maximum(np.einsum("nchwyx,fcyx->nfhw", windows, ws) + bs[None, :, None, None], 0)

    from ms_heron.workloads.suite import _workload  # the same packaging the suite uses

    workload = _workload(
        "custom",
        "fp32",
        dict(N=N, CI=CI, H=H, W=W, CO=CO),
        [x, w, b, out],
        2 * N * CO * H * W * CI * 9,
        inputs,
        reference,
    )
    return dataclasses.replace(
        workload, func=workload.func.with_attr("layout_free_buffers", [1, 2])
    )


def test_always_inline_fires_on_strictly_inlinable_producers_only(cpu_target):
    workload = _producer_gemm_relu(relu=True)
    (space,) = stock_design_spaces(workload.func, [AlwaysInline()], cpu_target)
    assert block_names(space) == ["C", "Relu"]  # A1 inlined; the output Relu is kept
    check_random_samples(space, workload, cpu_target, samples=1)
    padded = workloads.make("c2d", "fp32", **SMALL_SHAPES["c2d"])
    (space,) = stock_design_spaces(padded.func, [AlwaysInline()], cpu_target)
    assert "Xpad" in block_names(space)  # a branch (padding) is not strictly inlinable


def _select_then(epilogue):
    """``out = epilogue(P)`` after ``P``, an element-wise block with a select (not strictly
    inlinable, like a Winograd output transform)."""
    x = te.placeholder((8, 16), "float32", name="x")
    p = te.compute(
        (8, 16), lambda i, j: tvm.tirx.Select(j % 2 == 0, x[i, j] * 2.0, x[i, j]), name="P"
    )
    return te.create_prim_func([x, epilogue(p)])


def test_an_element_wise_block_that_stays_takes_its_epilogue_in(cpu_target):
    """The producer with a select stays, and its bias-and-ReLU epilogue is inlined into it (one
    pass over memory); an epilogue reading two of its elements per output cannot be, and stays
    beside it, the space still generated."""

    def bias_relu(p):
        biased = te.compute((8, 16), lambda i, j: p[i, j] + 1.0, name="E")
        return te.compute((8, 16), lambda i, j: te.max(biased[i, j], 0.0), name="F")

    relu = _select_then(bias_relu)
    (space,) = stock_design_spaces(relu, [AlwaysInline()], cpu_target)
    assert block_names(space) == ["P"]
    x = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((8, 16), "float32"))
    tvm.compile(space.mod, target=cpu_target)(tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(
        out.numpy(), np.maximum(np.where(np.arange(16) % 2 == 0, 2 * x, x) + 1, 0)
    )
    mirrored = _select_then(lambda p: te.compute((8, 16), lambda i, j: p[i, j] + p[i, 15 - j]))
    (space,) = stock_design_spaces(mirrored, [AlwaysInline()], cpu_target)
    assert len(block_names(space)) == 2


def test_a_transpose_feeding_a_gemm_is_placed_not_inlined(cpu_target):
    """TVM's TBG (attention's ``Q·Kᵀ`` with both operands transposed by TE stages): inlined, the
    GEMM would gather ``value`` along its vector lanes; kept, ComputeLocation samples where the
    transpose runs (MetaSchedule's best program computes it per tile), and samples stay correct."""
    from tvm.s_tir.meta_schedule.testing.te_workload import transpose_batch_matmul

    workload = from_func(te.create_prim_func(transpose_batch_matmul(1, 32, 2, 16)), "tbg")
    (space,) = stock_design_spaces(
        workload.func, [AlwaysInline(), MultiLevelTiling(), ComputeLocation()], cpu_target
    )
    kinds = [i.kind.name for i in space.trace.insts]
    # The space's own decisions are random (inlining is one of them): its trace says what the rules
    # did.
    assert (
        "ComputeInline" not in kinds
        and kinds.count("SampleComputeLocation") == kinds.count("ComputeAt") == 2
    )
    assert {str(i.attrs[0]) for i in space.trace.insts if i.kind.name == "GetSBlock"} >= {
        "query_T",
        "value_T",
    }
    check_random_samples(space, workload, cpu_target, samples=2)


def test_tensorize_fires_on_int8_with_the_cpus_dot_product_only(int8_target):
    int8 = suite("gemm", "int8", **SMALL_SHAPES["gemm"])
    (space,) = stock_design_spaces(int8.func, [Tensorize()], int8_target)
    outer = space.get(space.get_sblock("C_o"))
    assert outer.annotations[AUTO_TENSORIZE] == HOST_DOT.name
    check_random_samples(space, int8, int8_target, samples=1)
    assert HOST_DOT.form in build(finished(space, int8.func).mod, int8_target).mod.inspect_source(
        "asm"
    )

    fp32 = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    (space,) = stock_design_spaces(fp32.func, [Tensorize()], int8_target)
    assert block_names(space) == ["C"] and not schedule_steps(space)
    generic = Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 2})  # no AVX2: no dot product
    (space,) = stock_design_spaces(int8.func, [Tensorize()], generic)
    assert not schedule_steps(space)


@pytest.mark.parametrize("family", ["gemm", "c2d", "scan"])
def test_multi_level_tiling_fires_on_data_reuse(family, cpu_target):
    workload = workloads.make(family, "fp32", **SMALL_SHAPES[family])
    (space,) = stock_design_spaces(workload.func, [MultiLevelTiling()], cpu_target)
    compute = space.get_sblock("C")
    assert space.get(compute).annotations[TILING_STRUCTURE] == "SSRSRS"
    iters = space.get(compute).iter_vars
    n_s = sum(int(iv.iter_type) == 0 for iv in iters)
    assert len(space.get_loops(compute)) == 4 * n_s + 2 * (len(iters) - n_s)
    for other in set(block_names(space)) - {"C"}:  # Xpad / Tri: no reduction, no reuse: untouched
        assert TILING_STRUCTURE not in space.get(space.get_sblock(other)).annotations
    check_random_samples(space, workload, cpu_target)


def test_multi_level_tiling_tiles_the_outer_block_of_tensorized_code(int8_target):
    workload = suite("c2d", "int8", **SMALL_SHAPES["c2d"])
    (space,) = stock_design_spaces(workload.func, [Tensorize(), MultiLevelTiling()], int8_target)
    assert TILING_STRUCTURE in space.get(space.get_sblock("C_o")).annotations
    check_random_samples(space, workload, int8_target)


def test_add_cache_stage_writes_back_at_each_level(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    spaces = stock_design_spaces(workload.func, [MultiLevelTiling(), AddCacheStage()], cpu_target)
    levels = sorted(int(s.get(s.get_sblock("C_global")).annotations[CACHE_LEVEL]) for s in spaces)
    assert levels == [0, 1]
    for space in spaces:
        check_random_samples(space, workload, cpu_target, samples=2)


def test_add_cache_stage_fuses_a_fusible_consumer_instead(cpu_target):
    workload = _producer_gemm_relu(relu=True)
    spaces = stock_design_spaces(workload.func, [MultiLevelTiling(), AddCacheStage()], cpu_target)
    assert len(spaces) == 2
    for space in spaces:
        assert "C_global" not in str(space.mod)
        assert CACHE_LEVEL in space.get(space.get_sblock("Relu")).annotations
        check_random_samples(space, workload, cpu_target, samples=2)


def test_a_consumer_that_reads_a_second_producer_is_written_back_not_fused(cpu_target):
    """``(A @ W) * max(A)``, a dynamic quantization's scale: the scale's block stays at the root, so
    the epilogue cannot follow the GEMM's tile; the GEMM gets its accumulator at each level instead
    of the rule failing on the block (which cost the space its write-back stage)."""
    M, N, K = 16, 32, 16
    a = te.placeholder((M, K), "float32", name="A")
    w = te.placeholder((K, N), "float32", name="W")
    r = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="C")
    i0, k0 = te.reduce_axis((0, M), name="i0"), te.reduce_axis((0, K), name="k0")
    amax = te.compute((), lambda: te.max(a[i0, k0], axis=[i0, k0]), name="Amax")
    out = te.compute((M, N), lambda i, j: c[i, j] * amax[()], name="Scaled")
    workload = from_func(te.create_prim_func([a, w, out]))
    spaces = stock_design_spaces(workload.func, [MultiLevelTiling(), AddCacheStage()], cpu_target)
    levels = sorted(int(s.get(s.get_sblock("C_global")).annotations[CACHE_LEVEL]) for s in spaces)
    assert levels == [0, 1]
    for space in spaces:
        assert CACHE_LEVEL not in space.get(space.get_sblock("Scaled")).annotations
        check_random_samples(space, workload, cpu_target, samples=1)


def test_a_consumer_whose_other_producer_inlines_is_fused(cpu_target):
    """``(A @ W) - float(zp)``, a quantized GEMM's zero point cast at the root: the cast is inlined
    into the epilogue first, which then follows the GEMM's tile (no second pass over C)."""
    M, N, K = 16, 32, 16
    a = te.placeholder((M, K), "float32", name="A")
    w = te.placeholder((K, N), "float32", name="W")
    zp = te.placeholder((), "int32", name="ZeroPoint")
    r = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="C")
    shift = te.compute((), lambda: zp[()].astype("float32"), name="Shift")
    out = te.compute((M, N), lambda i, j: c[i, j] - shift[()], name="Shifted")
    workload = from_func(te.create_prim_func([a, w, zp, out]))
    spaces = stock_design_spaces(workload.func, [MultiLevelTiling(), AddCacheStage()], cpu_target)
    levels = sorted(int(s.get(s.get_sblock("Shifted")).annotations[CACHE_LEVEL]) for s in spaces)
    assert levels == [0, 1]
    for space in spaces:
        assert block_names(space) == ["C", "Shifted"]
        check_random_samples(space, workload, cpu_target, samples=1)


def test_nchw_convolution_vectorizes_its_output_channels_through_a_transposed_accumulator(
    cpu_target,
):
    """6 output columns fill no vector, 16 output channels fill one: the micro-kernel's lanes run
    over the channels (the layout-free weight is re-laid out to match), the accumulator tile is
    stored channels-last and the bias + ReLU follow it at the same level. A GEMM whose activation
    would have to be read across rows keeps its lanes on the output's last axis."""
    workload = _nchw_conv_bias_relu()
    rules = [MultiLevelTiling(), AddCacheStage(), ParallelVectorizeUnroll()]
    spaces = stock_design_spaces(workload.func, rules, cpu_target)
    assert len(spaces) == 2
    for space in spaces:
        block = space.get_sblock("C")
        lane_var = space.get(space.get_loops(block)[-1]).loop_var
        channel = space.get(block).iter_vars[1].var
        bindings = {
            iv.var.name: v
            for iv, v in zip(space.get(block).iter_vars, block_realize(space, block).iter_values)
        }
        assert lane_var in tvm.tirx.analysis.undefined_vars(bindings[channel.name])
        accumulator = space.get(block).writes[0]
        # channels last
        assert accumulator.source.name == "C_global" and int(accumulator.source.shape[-1]) == 16
        assert CACHE_LEVEL in space.get(space.get_sblock("Relu")).annotations
        check_random_samples(space, workload, cpu_target, samples=2)
    # 24 lanes: 1.5 vectors, but A is read along k
    gemm = workloads.make("gemm", "fp32", M=16, N=24, K=16)
    for space in stock_design_spaces(gemm.func, rules, cpu_target):
        block = space.get_sblock("C")
        lane_var = space.get(space.get_loops(block)[-1]).loop_var
        bindings = {
            iv.var.name: v
            for iv, v in zip(space.get(block).iter_vars, block_realize(space, block).iter_values)
        }
        assert lane_var in tvm.tirx.analysis.undefined_vars(
            bindings[space.get(block).iter_vars[1].var.name]
        )


def test_pack_operand_packs_the_streamed_input_into_panels_when_sampled(cpu_target):
    """A GEMM's ``W[k, n]`` (an input, re-read by every row tile): whether to pack it is a sampled
    choice; packed, PackPanels copies it into ``[n // NR, k, n % NR]`` with NR the sampled lane
    tile, in a parallel loop of its own, and the result is unchanged. A layout-free weight is left
    to RewriteLayout, and int8 (tensorized) blocks are not touched."""
    workload = workloads.make("gemm", "fp32", M=32, N=64, K=16)
    rules = [
        MultiLevelTiling(),
        AddCacheStage(levels=(1,)),
        PackOperand(),
        ParallelVectorizeUnroll(),
    ]
    (space,) = stock_design_spaces(workload.func, rules, cpu_target)
    trace = space.trace.simplified(remove_postproc=True)
    (choice,) = [
        inst
        for inst in trace.insts
        if inst.kind.name == "SampleCategorical" and list(inst.attrs[0]) == [0, 1]
    ]
    for decision in (0, 1):
        for seed in (1, 2):
            sch = tvm.s_tir.Schedule(workload.func, seed=seed)
            tvm.s_tir.Trace(trace.insts, {choice: decision}).apply_to_schedule(
                sch, remove_postproc=True
            )
            assert all(p.apply(sch) for p in default_postprocs())
            packed = [b for b in block_names(sch) if b == "W_global"]
            assert bool(packed) == bool(decision)
            if decision:
                block = sch.get_sblock("C_update")
                lanes = int(sch.get(sch.get_loops(block)[-1]).extent)
                panels = next(r.source for r in sch.get(block).reads if r.source.name == "W_global")
                assert [int(d) for d in panels.shape] == [64 // lanes, 16, lanes]
                copy_loops = [sch.get(lp) for lp in sch.get_loops(sch.get_sblock("W_global"))]
                assert (
                    copy_loops[0].kind == tvm.tirx.ForKind.PARALLEL
                    and copy_loops[-1].kind == tvm.tirx.ForKind.VECTORIZED
                )
            run_and_check(build(sch.mod, cpu_target), workload, seed=seed)
    free = dataclasses.replace(workload, func=workload.func.with_attr("layout_free_buffers", [1]))
    (space,) = stock_design_spaces(free.func, rules, cpu_target)
    assert PACK_PANELS not in space.mod.script()
    int8 = suite("gemm", "int8", **SMALL_SHAPES["gemm"])
    (space,) = stock_design_spaces(int8.func, [Tensorize(), *rules], cpu_target)
    assert PACK_PANELS not in space.mod.script()


def test_add_cache_stage_needs_a_tiled_block(cpu_target):
    workload = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    (space,) = stock_design_spaces(workload.func, [AddCacheStage()], cpu_target)
    assert not schedule_steps(space)


def _annotated(spaces, key: str) -> set[str]:
    """The names of the blocks that carry annotation ``key`` in any of ``spaces``."""
    return {
        name
        for space in spaces
        for name in block_names(space)
        if key in space.get(space.get_sblock(name)).annotations
    }


def test_multi_level_spm_adds_tile_buffers_as_a_second_space(int8_target):
    workload = suite("gemm", "int8", **SMALL_SHAPES["gemm"])
    rules = [Tensorize(), MultiLevelTiling(), MultiLevelSPM()]
    plain, packed = sorted(
        stock_design_spaces(workload.func, rules, int8_target), key=lambda s: len(block_names(s))
    )
    activation = "A_global" if HOST_DOT.widens else "A"  # vpmaddwd reads the u8 operand's s16 copy
    assert block_names(plain) == ([activation] if HOST_DOT.widens else []) + ["C_o"]
    assert _annotated([packed], SPM_LEVEL) == {f"{activation}_global", "W_global"}
    check_random_samples(packed, workload, int8_target)
    # a constant weight arrives in the tile's order (RewriteLayout): only the activation is copied
    free = dataclasses.replace(workload, func=workload.func.with_attr("layout_free_buffers", [1]))
    assert _annotated(stock_design_spaces(free.func, rules, int8_target), SPM_LEVEL) == {
        f"{activation}_global"
    }
    # a constant weight stored as Relax's matmul reads it ([K, N]) is packed at compile time (the
    # Tensorize rule's copy, which Relax folds): that packed copy is not copied again per call
    shape = SMALL_SHAPES["gemm"]
    a = te.placeholder((shape["M"], shape["K"]), "uint8", name="A")
    w = te.placeholder((shape["K"], shape["N"]), HOST_DOT.weight_dtype, name="W")
    k = te.reduce_axis((0, shape["K"]), name="k")
    c = te.compute(
        (shape["M"], shape["N"]),
        lambda i, j: te.sum(a[i, k].astype("int32") * w[k, j].astype("int32"), axis=k),
        name="C",
    )
    func = te.create_prim_func([a, w, c]).with_attr("layout_free_buffers", [1])
    spaces = stock_design_spaces(func, rules, int8_target)
    assert _annotated(spaces, LAYOUT_REWRITE_PREPROC) == {"W_global"}
    assert _annotated(spaces, SPM_LEVEL) == {f"{activation}_global"}


def test_multi_scope_spm_only_on_targets_with_scratchpads(cpu_target):
    workload = workloads.make("gemm", "fp16", **SMALL_SHAPES["gemm"])
    (cpu_space,) = stock_design_spaces(
        workload.func, [MultiLevelTiling(), MultiScopeSPM()], cpu_target
    )
    assert "shared" not in str(cpu_space.mod)
    gpu = Target("nvidia/nvidia-h100", host={"kind": "llvm"})
    (gpu_space,) = stock_design_spaces(workload.func, [MultiLevelTiling(), MultiScopeSPM()], gpu)
    text = str(gpu_space.mod)
    assert 'scope="shared"' in text and 'scope="local"' in text


def test_parallel_vectorize_unroll(cpu_target):
    workload = workloads.make("c2d", "fp32", **SMALL_SHAPES["c2d"])
    rules = [MultiLevelTiling(), ParallelVectorizeUnroll()]
    (space,) = stock_design_spaces(workload.func, rules, cpu_target)
    text = space.mod.script()
    assert "T.parallel" in text and "T.vectorized" in text
    assert "meta_schedule.unroll_explicit" in text
    check_random_samples(space, workload, cpu_target)


def test_parallel_vectorize_unroll_never_vectorizes_around_tensorized_code(int8_target):
    int8 = suite("gemm", "int8", **SMALL_SHAPES["gemm"])
    (space,) = stock_design_spaces(
        int8.func, [Tensorize(), MultiLevelTiling(), ParallelVectorizeUnroll()], int8_target
    )
    assert "T.vectorized" not in space.mod.script()  # never around tensorized code
    check_random_samples(space, int8, int8_target)


def _row_centering() -> Workload:
    """fp32 ``x - mean(x, axis=1)``: a row reduction and an element-wise output, neither
    tileable."""
    M, K = 8, 96
    x = te.placeholder((M, K), "float32", name="X")
    r = te.reduce_axis((0, K), name="k")
    total = te.compute((M,), lambda i: te.sum(x[i, r], axis=r), name="RowSum")
    out = te.compute((M, K), lambda i, j: x[i, j] - total[i] / K, name="Centered")

    def inputs(rng):
        return [rng.uniform(-1, 1, (M, K)).astype("float32")]

    def reference(a):
        return a.astype(np.float64) - a.astype(np.float64).mean(axis=1, keepdims=True)

    from ms_heron.workloads.suite import _workload  # the same packaging the suite uses

    return _workload("custom", "fp32", dict(M=M, K=K), [x, out], 2 * M * K, inputs, reference)


def test_parallel_vectorize_unroll_covers_untiled_reductions_and_wide_rows(cpu_target):
    workload = _row_centering()
    (space,) = stock_design_spaces(
        workload.func, [MultiLevelTiling(), ParallelVectorizeUnroll()], cpu_target
    )
    text = space.mod.script()
    assert text.count("T.parallel") == 2  # the row loop of the reduction and of the output
    # 96 lanes do not fit in 64: split to the largest factor that does
    assert "T.vectorized(48)" in text
    check_random_samples(space, workload, cpu_target)


@pytest.mark.parametrize("family", ["softmax", "layernorm"])
def test_lane_reduction_vectorizes_row_reductions_of_softmax_and_layer_norm(family, cpu_target):
    """Every row reduction becomes vector-lane partial sums (rfactor), and the whole row kernel one
    parallel loop over rows (the reductions computed inside the output's row loop)."""
    workload = workloads.make(family, "fp32", M=16, N=192)
    rules = [AlwaysInline(), MultiLevelTiling(), LaneReduction(), ParallelVectorizeUnroll()]
    (space,) = stock_design_spaces(workload.func, rules, cpu_target)
    reductions = [
        b
        for b in block_names(space)
        if "rf" not in b and space.get(space.get_sblock(b)).init is not None
    ]
    assert len(reductions) == 2  # max and sum, or sum and variance
    lanes = vector_bytes(cpu_target) // 4
    for name in reductions:
        width = int(space.get(space.get_sblock(name)).annotations[LANE_REDUCTION])
        assert width % lanes == 0 and 192 % width == 0
        text = finished(space, workload.func).mod.script()
        # ``width`` partial results per row (accumulator vectors), folded into one vector, then its
        # lanes
        stages = (
            [(f"{name}_rf_rf_update", width), (f"{name}_rf_update", lanes)]
            if width > lanes
            else [(f"{name}_rf_update", lanes)]
        )
        for stage, vector in stages:
            assert f'T.sblock("{stage}")' in text
            before = text[
                text.index(f'T.sblock("{stage}")') - 200 : text.index(f'T.sblock("{stage}")')
            ]
            # the lanes of the partial results, innermost
            assert f"T.vectorized({vector})" in before
    assert text.count("T.parallel") == 1
    check_random_samples(space, workload, cpu_target, samples=1)


def test_lane_reduction_leaves_short_and_tileable_reductions_alone(cpu_target):
    # 30 is not a multiple of 4 fp32 lanes, the narrowest vector the rule uses
    odd = workloads.make("softmax", "fp32", M=4, N=30)
    (space,) = stock_design_spaces(odd.func, [LaneReduction()], cpu_target)
    assert "_rf" not in space.mod.script()
    # data reuse: multi-level tiling's
    gemm = workloads.make("gemm", "fp32", **SMALL_SHAPES["gemm"])
    (space,) = stock_design_spaces(gemm.func, [LaneReduction()], cpu_target)
    assert "_rf" not in space.mod.script()


def test_lane_reduction_splits_a_ragged_row_into_narrower_vectors(cpu_target):
    """A row of 20 (Whisper's 1500 in small) fills no AVX2 or AVX-512 vector, but 5 SSE vectors: the
    rule reduces it in 4 lanes (128 bits) on any x86 target, and the kernel computes softmax."""
    workload = workloads.make("softmax", "fp32", M=6, N=20)
    (space,) = stock_design_spaces(
        workload.func, [AlwaysInline(), LaneReduction(), ParallelVectorizeUnroll()], cpu_target
    )
    widths = {
        int(space.get(space.get_sblock(b)).annotations[LANE_REDUCTION])
        for b in block_names(space)
        if LANE_REDUCTION in space.get(space.get_sblock(b)).annotations
    }
    assert widths == {4}  # 20 = 5 x 4: one vector accumulator of 4 lanes, for the max and the sum
    sch = finished(space, workload.func)
    assert "T.vectorized(4)" in sch.mod.script()
    run_and_check(build(sch.mod, cpu_target), workload)


def test_compute_location_puts_a_convolutions_padding_at_a_sampled_loop(cpu_target):
    """The padding of a padded convolution gets a SampleComputeLocation decision; re-sampled
    locations compute it inside the convolution's loops (or at the root, or inline) and stay
    correct. The unpadded convolution's blocks are left alone."""
    workload = workloads.make("c2d", "fp32", **SMALL_SHAPES["c2d"])
    rules = [MultiLevelTiling(), ParallelVectorizeUnroll(), ComputeLocation()]
    (space,) = stock_design_spaces(workload.func, rules, cpu_target)
    steps = schedule_steps(space)
    assert steps.count("SampleComputeLocation") == 1 and steps.count("ComputeAt") == 1
    # the space may inline it
    (pad,) = [b for b in block_names(tvm.s_tir.Schedule(workload.func)) if "pad" in b.lower()]
    nested = 0
    for seed in range(1, 9):
        sch = finished(space, workload.func, seed=seed)
        run_and_check(build(sch.mod, cpu_target), workload, seed=seed)
        # not inlined: inside the conv's loops when it has more loops than iterators
        if pad in block_names(sch):
            block = sch.get_sblock(pad)
            nested += len(sch.get_loops(block)) > len(sch.get(block).iter_vars)
    assert nested >= 2
    unpadded = workloads.make("c2d", "fp32", N=1, H=6, W=6, CI=8, CO=16, KH=1, KW=1)
    (plain,) = stock_design_spaces(unpadded.func, rules, cpu_target)
    assert "SampleComputeLocation" not in schedule_steps(plain)


def test_lane_reduction_fuses_a_norms_two_reduction_axes(cpu_target):
    """TVM's NRM (a norm over a whole matrix per batch): its two reduction loops are fused into one
    before the lane split (TVM's rfactor takes one loop), and the result matches the unscheduled
    kernel."""
    from tvm.s_tir.meta_schedule.testing.te_workload import norm_bmn  # pylint: disable=import-outside-toplevel

    workload = from_func(te.create_prim_func(norm_bmn(2, 32, 48)), "nrm")
    (space,) = stock_design_spaces(
        workload.func, [LaneReduction(), ParallelVectorizeUnroll()], cpu_target
    )
    # four vector accumulators of fp32 lanes (32 x 48 has room for them)
    lanes = vector_bytes(cpu_target) // 4
    assert (
        'T.sblock("C_rf")' in space.mod.script()
        and f"T.vectorized({4 * lanes})" in space.mod.script()
    )
    run_and_check(build(finished(space, workload.func).mod, cpu_target), workload)


# -- PadExtents -------------------------------------------------------------------------------


def _is_padded(space) -> bool:
    return any(i.kind.name == "PadEinsum" for i in space.trace.insts)


def test_prime_extent_is_padded_into_a_space_with_real_tiles(cpu_target):
    """A GEMM with M = 127 (prime): with ``tile_extents`` (on by default), besides the space as
    it is, HeronSpace yields one padded by ``pad_einsum`` to 128, whose tiles of M are neither 1 nor
    the whole extent; its random samples
    compute the right answer, and the padded work stays within the waste bound in the lowered
    TIR."""
    from ms_heron.rules import default_rules  # pylint: disable=import-outside-toplevel
    from ms_heron.space import HeronSpace, design_spaces  # pylint: disable=import-outside-toplevel

    workload = workloads.make("gemm", "fp32", M=127, N=64, K=32)
    rules_off = [
        PadExtents(tile_extents=False) if isinstance(r, PadExtents) else r
        for r in default_rules(cpu_target)
    ]
    without = design_spaces(
        workload.func, cpu_target, HeronSpace(rules=rules_off, include_default_spaces=False)
    )
    assert not any(_is_padded(s) for s in without)
    spaces = design_spaces(workload.func, cpu_target, HeronSpace(include_default_spaces=False))
    padded = [s for s in spaces if _is_padded(s)]
    assert padded and len(padded) < len(spaces)  # padding is a choice: the unpadded spaces stay
    space = padded[0]
    m_tiles = next(
        space.trace.decisions[i]
        for i in space.trace.insts
        if i.kind.name == "SamplePerfectTile"
        and math.prod(int(x) for x in space.trace.decisions[i]) == 128
    )
    assert any(1 < int(t) < 128 for t in m_tiles)
    check_random_samples(space, workload, cpu_target, samples=2)
    # The padded input copy's place is sampled (inlined, or computed per tile): the padded work is
    # what the tiled GEMM block iterates over.
    padded = [int(iv.dom.extent) for iv in space.get(space.get_sblock("C")).iter_vars]
    assert (
        padded == [128, 64, 32]
        and math.prod(padded) / (127 * 64 * 32) <= 1 + PadExtents().max_waste
    )


def test_a_padded_gemms_epilogue_runs_in_its_tiles_write_back(cpu_target):
    """A GEMM with M = 197 (ViT's tokens) and a residual add: in every padded space of HeronSpace
    the add reads the padded result itself, under the GEMM's parallel tile loop, instead of a
    copy-back block standing in as the fused consumer while the add runs as a pass of its own over
    the whole output; the samples compute the right answer."""
    from ms_heron.space import HeronSpace, design_spaces  # pylint: disable=import-outside-toplevel
    from ms_heron.workloads.suite import _workload  # pylint: disable=import-outside-toplevel

    M, N, K = 197, 64, 32
    a = te.placeholder((M, K), "float32", name="A")
    w = te.placeholder((K, N), "float32", name="W")
    res = te.placeholder((M, N), "float32", name="R")
    r = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, r] * w[r, j], axis=r), name="C")
    out = te.compute((M, N), lambda i, j: c[i, j] + res[i, j], name="D")

    def inputs(rng):
        return [rng.uniform(-1, 1, s).astype("float32") for s in [(M, K), (K, N), (M, N)]]

    workload = _workload(
        "custom",
        "fp32",
        dict(M=M, N=N, K=K),
        [a, w, res, out],
        2 * M * N * K,
        inputs,
        lambda x, y, z: x.astype(np.float64) @ y + z,
    )
    spaces = design_spaces(workload.func, cpu_target, HeronSpace(include_default_spaces=False))
    padded = [s for s in spaces if _is_padded(s)]
    assert padded
    for space in padded:
        assert "C_pad" not in block_names(space)  # pad_einsum's copy-back, inlined into D
        gemm_loops, add_loops = (space.get_loops(space.get_sblock(b)) for b in ("C", "D"))
        assert space.get(add_loops[0]).same_as(space.get(gemm_loops[0]))
        check_random_samples(space, workload, cpu_target, samples=1)


@pytest.mark.parametrize(
    "shape,expected",
    [
        # the lane extent padded to whole 8- or 16-lane vectors
        (dict(M=128, N=1004, K=64), "lanes"),
        (dict(M=17, N=64, K=64), None),  # 17 -> 24 would add 41% work: over the bound, left alone
        (dict(M=128, N=64, K=768), None),  # nothing awkward
    ],
)
def test_padding_pads_only_awkward_extents_within_the_waste_bound(shape, expected, cpu_target):
    workload = workloads.make("gemm", "fp32", **shape)
    (space,) = stock_design_spaces(workload.func, [], cpu_target)
    rule = PadExtents(tile_extents=True)
    rule.target = cpu_target
    block = next(
        b for b in space.get_child_blocks(space.get_sblock("root")) if space.get(b).init is not None
    )
    padding = rule.padding(space, block)
    lanes = vector_bytes(cpu_target) // 4
    if expected is None:
        assert padding is None
    else:
        extents = [int(iv.dom.extent) for iv in space.get(block).iter_vars]
        assert padding == [lanes if e == 1004 else 1 for e in extents]


@pytest.mark.parametrize(
    "family,shape",
    [
        ("gemm", dict(M=127, N=1000, K=771)),  # no dot product's reduction (2 or 4) divides K
        ("c2d", dict(N=1, H=8, W=8, CI=3, CO=16, KH=3, KW=3, pad=1)),  # an RGB input's 3 channels
    ],
)
def test_int8_shapes_dot_product_tiles_do_not_divide_are_tensorized_through_padding(
    family, shape, int8_target
):
    """The Tensorize rule pads the block to whole tiles of the CPU's dot product (zero-filled input
    copies, the result copied back): random samples are bit-exact, the assembly has the dot
    product's instruction, and the padded work stays within ``max_waste`` in the lowered TIR."""
    workload = suite(family, "int8", **shape)
    # the second: 127 rows (a prime) padded for a register tile as well
    space, *rows_padded = stock_design_spaces(
        workload.func, [Tensorize(), MultiLevelTiling()], int8_target
    )
    assert len(rows_padded) <= 1
    assert space.get(space.get_sblock("C_o")).annotations[AUTO_TENSORIZE] == HOST_DOT.name
    check_random_samples(space, workload, int8_target, samples=1)
    mod = finished(space, workload.func).mod
    assert HOST_DOT.form in build(mod, int8_target).mod.inspect_source("asm")
    # zero-filled and packed in the dot product's layout by one pass
    padded_weight = allocations(mod)["W_pad"]
    true_weight = workload.random_inputs()[1].size
    assert true_weight < padded_weight <= (1 + Tensorize().max_waste) * true_weight


def test_a_stage_left_at_the_root_runs_on_every_core(int8_target):
    """A padded int8 weight's pad-and-pack copy stays at the root when no rule places it: the root's
    parallel annotation lets MetaSchedule's postproc run it on every core (serial, it took longer
    than the GEMM reading it), and the result copied back with it; the tiled GEMM keeps its own
    parallel loop."""
    workload = suite("gemm", "int8", M=16, N=36, K=64)  # 36 output lanes: padded for 8 or 16
    rules = [Tensorize(), MultiLevelTiling(), ParallelVectorizeUnroll()]
    (space,) = stock_design_spaces(workload.func, rules, int8_target)
    sch = finished(space, workload.func)
    kinds = tvm.tirx.ForKind
    # vpmaddwd reads the u8 operand's s16 copy
    copies = ["W_pad", "A_global"] if HOST_DOT.widens else ["W_pad"]
    assert all(sch.get(sch.get_loops(sch.get_sblock(c))[0]).kind == kinds.PARALLEL for c in copies)
    # the copies, the GEMM's outer tiles, the result copied back
    assert sch.mod.script().count("T.parallel(") == len(copies) + 2
    check_random_samples(space, workload, int8_target, samples=1)


def test_a_padded_weight_is_packed_tile_by_tile_where_the_search_places_it(int8_target):
    """In HeronSpace the pad-and-pack copy of a padded int8 weight walks the packed layout with each
    tile (16 x 4 for AVX-512 VNNI) unrolled (so LLVM vectorizes it; byte by byte it took longer than
    the GEMM), and its place is a sampled decision whose candidates leave out inlining into the
    tensorized GEMM: samples placed inside the GEMM's tiles pack per panel, as MLAS does, and are
    bit-exact."""
    from ms_heron.constraints import Solver, derive, replay  # pylint: disable=import-outside-toplevel
    from ms_heron.space import HeronSpace, design_spaces  # pylint: disable=import-outside-toplevel

    workload = suite("gemm", "int8", M=16, N=36, K=64)
    space = design_spaces(workload.func, int8_target, HeronSpace(include_default_spaces=False))[0]
    model = derive(space, int8_target)
    (location,) = [d for d in model.decisions if d.kind == "location"]
    # the root, and loops of the GEMM
    assert -2 not in location.candidates and len(location.candidates) > 2
    places = set()
    for values in Solver(model, seed=0).samples(8):
        sch = replay(model, space.trace.simplified(remove_postproc=True), workload.func, values)
        assert all(p.apply(sch) for p in default_postprocs())
        loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("W_pad"))]
        assert [(int(lp.extent), lp.kind) for lp in loops[-2:]] == [
            (HOST_DOT.lanes, tvm.tirx.ForKind.UNROLLED),
            (HOST_DOT.reduction, tvm.tirx.ForKind.UNROLLED),
        ]
        if len(loops) not in places:  # each place once: bit-exact
            run_and_check(build(sch.mod, int8_target), workload)
            places.add(len(loops))
    assert len(places) > 1  # at the root and inside the GEMM's tiles


def _channels_last_to_first(n=1, h=4, w=6, c=32, swap=True) -> Workload:
    """``relu(transpose(Y) + X)``: an NHWC result back to NCHW with the residual add and ReLU fused
    (an int8 ResNet block's last kernel); with ``swap=False`` a transpose that keeps the contiguous
    axis, as attention's head split does."""
    y = te.placeholder((n, h, w, c) if swap else (h, n, w, c), "float32", name="Y")
    x = te.placeholder((n, c, h, w) if swap else (n, h, w, c), "float32", name="X")
    moved = (
        te.compute((n, c, h, w), lambda a, b, i, j: y[a, i, j, b], name="T")
        if swap
        else te.compute((n, h, w, c), lambda a, i, j, b: y[i, a, j, b], name="T")
    )
    added = te.compute(moved.shape, lambda *i: moved(*i) + x(*i), name="Add")
    out = te.compute(moved.shape, lambda *i: te.max(added(*i), 0.0), name="Relu")
    return from_func(te.create_prim_func([y, x, out]), "nhwc_to_nchw" if swap else "head_split")


def test_blocked_transpose_tiles_a_layout_change_with_its_epilogue(cpu_target):
    """The transpose and the add are inlined into the ReLU first (the rules meet the ReLU before its
    producers), then the read's contiguous axis (32 channels) and the write's (6 columns) are cut
    into power-of-two tiles, innermost, the write's tile vectorized and the rest one parallel loop;
    a transpose that keeps the contiguous axis is left to the parallel/vector rule."""
    workload = _channels_last_to_first()
    rules = [AlwaysInline(), BlockedTranspose(), ParallelVectorizeUnroll()]
    (space,) = stock_design_spaces(workload.func, rules, cpu_target)
    assert block_names(space) == ["Relu"]
    relu = space.get_sblock("Relu")
    assert (
        int(space.get(relu).annotations[TRANSPOSE_TILE])
        == min(16, vector_bytes(cpu_target) // 4) * 2
    )
    loops = [space.get(lp) for lp in space.get_loops(relu)]
    assert [int(lp.extent) for lp in loops[-2:]] == [min(16, vector_bytes(cpu_target) // 4), 2]
    kinds = tvm.tirx.ForKind
    assert [lp.kind for lp in loops] == [kinds.PARALLEL, kinds.SERIAL, kinds.VECTORIZED]
    check_random_samples(space, workload, cpu_target, samples=1)

    kept = _channels_last_to_first(swap=False)
    (space,) = stock_design_spaces(kept.func, rules, cpu_target)
    assert TRANSPOSE_TILE not in space.get(space.get_sblock("Relu")).annotations
    check_random_samples(space, kept, cpu_target, samples=1)


def test_blocked_transpose_inlines_a_producer_reached_along_two_paths_once(cpu_target):
    """GELU's ``h * erf(h)`` before the layout change reaches ``h`` twice while the producers are
    inlined; the second visit used to ask for a block already gone, and the rule was skipped."""
    n, h, w, c = 1, 4, 6, 32
    y = te.placeholder((n, h, w, c), "float32", name="Y")
    x = te.placeholder((n, c, h, w), "float32", name="X")
    half = te.compute(y.shape, lambda *i: y(*i) * 0.5, name="Half")
    erf = te.compute(y.shape, lambda *i: te.erf(half(*i)), name="Erf")
    gelu = te.compute(y.shape, lambda *i: half(*i) * erf(*i), name="Gelu")
    moved = te.compute((n, c, h, w), lambda a, b, i, j: gelu[a, i, j, b], name="T")
    out = te.compute(moved.shape, lambda *i: te.max(moved(*i) + x(*i), 0.0), name="Relu")
    workload = from_func(te.create_prim_func([y, x, out]), "gelu_nhwc_to_nchw")
    # without Always-Inline, which would inline them first, visiting the producers
    (space,) = stock_design_spaces(
        workload.func, [BlockedTranspose(), ParallelVectorizeUnroll()], cpu_target
    )
    assert block_names(space) == ["Relu"]
    assert TRANSPOSE_TILE in space.get(space.get_sblock("Relu")).annotations
    check_random_samples(space, workload, cpu_target, samples=1)


@pytest.mark.parametrize("swept", [True, False], ids=["swept_micro_tiles", "one_micro_tile"])
def test_an_init_over_many_micro_tiles_is_one_loop_and_builds_in_seconds(swept):
    """A 1x1 int8 convolution (14 x 14, 256 -> 1024 channels, ResNet-50's) whose middle spatial tile
    level sweeps 7 x 7 x 32 micro-tiles inside its outer reduction level zeroes all of them in its
    accumulator tile before the reduction: as the nest of constant loops RewriteReductionBlock
    writes, LLVM unrolled it into one block and took 2 minutes to generate its code (the builder
    gives 30 s). FuseTileInit
    makes it one loop over micro-tiles (each zeroed by the unrolled micro-tile loops), which builds
    in seconds and is exact; tiled so that the init zeroes one micro-tile, it is left as it is."""
    target = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    workload = workloads.c2d(N=1, H=14, W=14, CI=256, CO=1024, KH=1, KW=1, dot=dot_product(target))
    # accumulated in a tile buffer
    rules = [
        Tensorize(),
        MultiLevelTiling(),
        AddCacheStage(levels=(0,)),
    ]
    (space,) = stock_design_spaces(workload.func, rules, target)
    trace = space.trace.simplified(remove_postproc=True)
    # n, h, w, co / 8, kh, kw, ci / 2
    tiles = [i for i in trace.insts if i.kind.name == "SamplePerfectTile"]
    middle = (
        [[1, 1, 7, 2], [1, 1, 7, 2], [2, 1, 32, 2]]
        if swept
        else [[1, 7, 1, 2], [1, 7, 1, 2], [2, 32, 1, 2]]
    )
    for inst, decision in zip(tiles, [[1, 1, 1, 1], *middle, [1, 1], [1, 1], [2, 64]], strict=True):
        trace = trace.with_decision(inst, decision, remove_postproc=True)
    sch = Schedule(workload.func)
    trace.apply_to_schedule(sch, remove_postproc=True)
    assert all(p.apply(sch) for p in default_postprocs())
    init = [int(sch.get(lp).extent) for lp in sch.get_loops(sch.get_sblock("C_o_init"))]
    # one loop over micro-tiles, each 2 x 2 x 2 vectors unrolled; or the one micro-tile's loops
    assert init[-5:] == ([7 * 7 * 32, 1, 2, 2, 2] if swept else [1, 1, 2, 2, 2])
    started = time.perf_counter()
    # what the builder does, code generation included
    default_export(build_candidate(sch.mod, target, None))
    assert time.perf_counter() - started < local_builder().timeout_sec
    if not runs_here(target):
        pytest.skip(
            f"compiled for haswell; the host CPU ({cpu_name(host_target())}) has no AVX2 to run it"
        )
    run_and_check(build(sch.mod, target), workload)
