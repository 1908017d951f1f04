"""The panel prefetch every CPU build runs (:mod:`ms_heron.codegen.prefetch`): where a tiled GEMM's
row tiles reuse a packed weight panel, each row tile prefetches its share of the next panel and
the result is unchanged; a loop nest without such a panel is left as it is."""

import tvm
import tvm_ffi
from tvm.script import tirx as T

from ms_heron.codegen.prefetch import CACHE_LINE, MIN_PANEL_BYTES, inject_panel_prefetch
from ms_heron.workloads import from_func
from ms_heron.workloads.evaluate import build, run_and_check


def _gemm(cols: int, target, rows_inside_k: bool = True) -> tvm.tirx.PrimFunc:
    """C[64, 32] = A[64, 256] x W, W packed ``[32 // cols, 4, 64, cols]``: per column panel ``j``,
    k-blocks of 64 (``k0``), row tiles of 4 (``i``) inside them (or outside, ``rows_inside_k``
    False), and a 4 x ``cols`` register tile over 64 steps of ``k``; bound to ``target``, as the
    build's pipeline has it."""
    panels = 32 // cols

    @T.prim_func(s_tir=True)
    def gemm(
        A: T.Buffer((64, 256), "float32"),
        W: T.Buffer((panels, 4, 64, cols), "float32"),
        C: T.Buffer((64, 32), "float32"),
    ):
        for j, k0, i, k1, ii, jj in T.grid(panels, 4, 16, 64, 4, cols):
            with T.sblock("C"):
                vi = T.axis.spatial(64, i * 4 + ii)
                vj = T.axis.spatial(32, j * cols + jj)
                vk = T.axis.reduce(256, k0 * 64 + k1)
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * W[vj // cols, vk // 64, vk % 64, vj % cols]

    if rows_inside_k:
        return gemm.with_attr("target", target)
    sch = tvm.s_tir.Schedule(gemm)
    _, k0, i, *_ = sch.get_loops(sch.get_sblock("C"))
    sch.reorder(i, k0)
    return sch.mod["main"].with_attr("target", target)


def test_row_tiles_prefetch_the_next_k_blocks_weight_panel_and_compute_the_same(cpu_target):
    func = _gemm(
        cols=16, target=cpu_target
    )  # a k-block's panel: 64 x 16 fp32 = 4 KB, 64 cache lines
    text = inject_panel_prefetch()(tvm.IRModule({"main": func})).script()
    assert text.count("llvm.prefetch") == 1
    # inside the row-tile loop: 64 lines over 16 row tiles, 4 each, from the next k-block's panel
    lines = 64 * 16 * 4 // CACHE_LINE // 16
    assert f"for prefetch_line in range(T.int64({lines})):" in text
    # panel k0 + 1: 64 x 16 elements on
    assert 'T.Cast("int64", k0) * T.int64(1024) + T.int64(1024)' in text
    loops = [line.strip() for line in text.splitlines() if line.strip().startswith("for ")]
    assert (
        loops.index(next(x for x in loops if "prefetch_line" in x))
        == loops.index(next(x for x in loops if x.startswith("for j, k0, i in"))) + 1
    )
    # the product's build runs it: the kernel issues prefetches and matches the unprefetched one
    lib = build(func, cpu_target)
    assert "prefetcht0" in lib.mod.inspect_source("asm")
    run_and_check(lib, from_func(func, "panel_gemm"))


def test_loop_nests_without_a_reused_panel_are_left_alone(cpu_target):
    # k-blocks of 2 KB, below the smallest panel worth a prefetch; a column panel (8 KB) reused by
    # the row tiles only under the k-block loop, which moves it
    small = _gemm(cols=8, target=cpu_target)
    assert 64 * 8 * 4 < MIN_PANEL_BYTES
    mod = tvm.IRModule({"main": small})
    assert tvm_ffi.structural_equal(inject_panel_prefetch()(mod), mod)


def test_a_column_panel_the_row_tiles_reuse_is_prefetched_during_the_one_before(cpu_target):
    """Row tiles outside the k-blocks: each reads its column's whole panel (4 k-blocks x 64 x 16
    fp32, 16 KB), so the next column's is fetched meanwhile, as the pass reads "``k``" as any loop
    that moves to the next panel."""
    func = _gemm(cols=16, target=cpu_target, rows_inside_k=False)
    text = inject_panel_prefetch()(tvm.IRModule({"main": func})).script()
    assert 'T.Cast("int64", j) * T.int64(4096) + T.int64(4096)' in text  # panel j + 1
    run_and_check(build(func, cpu_target), from_func(func, "column_panel_gemm"))


def _cache_blocked_gemm(target) -> tvm.tirx.PrimFunc:
    """C[64, 256] = A[64, 128] x W, W packed ``[2, 16, 64, 16]``, blocked as BLIS blocks a cache
    block: per k-block of 64 (``k0``) A's block is copied first, then 16 row tiles of 4 (``i``)
    sweep the 16 column panels (``j``). One k-block's weight, 64 x 256 fp32 (64 KB), is more than
    half of any L1 seen here and less than half of any L2."""

    @T.prim_func(s_tir=True)
    def gemm(
        A: T.Buffer((64, 128), "float32"),
        W: T.Buffer((2, 16, 64, 16), "float32"),
        C: T.Buffer((64, 256), "float32"),
    ):
        A_block = T.sblock_alloc_buffer((64, 128))
        for k0 in range(2):
            for r, c in T.grid(64, 64):
                with T.sblock("A_block"):
                    vr = T.axis.spatial(64, r)
                    vc = T.axis.spatial(128, k0 * 64 + c)
                    A_block[vr, vc] = A[vr, vc]
            for i, j, k1, ii, jj in T.grid(16, 16, 64, 4, 16):
                with T.sblock("C"):
                    vi = T.axis.spatial(64, i * 4 + ii)
                    vj = T.axis.spatial(256, j * 16 + jj)
                    vk = T.axis.reduce(128, k0 * 64 + k1)
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = (
                        C[vi, vj] + A_block[vi, vk] * W[vk // 64, vj // 16, vk % 64, vj % 16]
                    )

    return gemm.with_attr("target", target)


def test_a_cache_blocks_weight_is_prefetched_into_l2_over_every_tile_that_sweeps_it(cpu_target):
    """Past half of L1 the next k-block's weight goes to L2 (``prefetcht1``), spread over the row
    tiles and the column panels they sweep (256 iterations, 4 of its 1024 lines each), with A's
    block copied ahead of them in the k-block; the result is unchanged."""
    func = _cache_blocked_gemm(cpu_target)
    text = inject_panel_prefetch()(tvm.IRModule({"main": func})).script()
    assert text.count("llvm.prefetch") == 1 and ", 0, 2, 1)" in text  # read, L2, data
    assert (
        '((T.Cast("int64", i) * T.int64(16) + T.Cast("int64", j)) * T.int64(4) + prefetch_line)'
        in text
    )
    loops = [line.strip() for line in text.splitlines() if line.strip().startswith("for ")]
    assert loops[loops.index(next(x for x in loops if "prefetch_line" in x)) - 1].startswith(
        "for i, j in"
    )
    lib = build(func, cpu_target)
    assert "prefetcht1" in lib.mod.inspect_source("asm")
    run_and_check(lib, from_func(func, "cache_blocked_gemm"))
