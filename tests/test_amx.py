"""AMX-INT8 tile kernels: the intrinsic, the Tensorize rule's tile space, the OS's tile state, the
peak."""

import subprocess
import sys

import numpy as np
import pytest
import tvm
from rule_helpers import started_search, stock_design_spaces
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir.schedule.transform import tile_with_tensor_intrin
from tvm.target import Target

from ms_heron import HeronSpace, workloads
from ms_heron.codegen import finish_amx_kernels
from ms_heron.hardware.dot_products import VNNI
from ms_heron.hardware.peak import amx_peak_gops, dot_peak_gops, int8_peak
from ms_heron.hardware.targets import TargetError, has_amx
from ms_heron.intrinsics import ensure_registered, is_amx
from ms_heron.intrinsics.amx import TILE_CONFIG, intrinsic_name
from ms_heron.rules import AddCacheStage, AlwaysInline, MultiLevelTiling, Tensorize
from ms_heron.schedule.annotations import AUTO_TENSORIZE
from ms_heron.schedule.gemm_view import as_gemm
from ms_heron.testing.int8 import adversarial_inputs
from ms_heron.tuning.api import best_schedule, tune_workload
from ms_heron.workloads.evaluate import build, run_and_check
from ms_heron.workloads.workload import Workload, from_func

#: A VNNI CPU that is not this machine: the OS's tile grant cannot be asked for it.
OTHER_CPU = Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
#: An AMX CPU to compile tile code for (and inspect) on any host.
SAPPHIRE_RAPIDS = Target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2})


def _tensorized_gemm(
    M: int, N: int, K: int, depth: int, *, walk: str = "columns", parallel: bool = True
):
    """The suite's int8 GEMM (weights already in VNNI's packed layout) split by hand for the AMX
    intrinsic of reduction ``64 * depth``: the other dimension's 32-blocks in parallel, ``walk``'s
    in the loop inside, the reduction's calls innermost, and its init where RewriteReductionBlock
    puts it (before the reduction's loop)."""
    ensure_registered()
    workload = workloads.gemm(M=M, N=N, K=K)
    sch = Schedule(workload.func)
    block = sch.get_sblock("C")
    outer = sch.blockize(tile_with_tensor_intrin(sch, block, intrinsic_name(depth)))
    rows, columns, reduction = sch.get_loops(outer)
    if walk == "rows":
        sch.reorder(columns, rows)
    if parallel:
        sch.parallel(sch.get_loops(outer)[0])
    sch.decompose_reduction(outer, reduction)
    sch.tensorize(outer, intrinsic_name(depth))
    return workload, sch


def _finished(sch) -> tvm.tirx.PrimFunc:
    """The kernel after :func:`finish_amx_kernels`."""
    func = sch.mod["main"].with_attr("target", SAPPHIRE_RAPIDS)
    return finish_amx_kernels()(tvm.IRModule({"main": func}))["main"]


def _allocated(sch) -> list[tuple[str, tuple[int, ...]]]:
    """The dtype and shape of each buffer the function allocates."""
    return [
        (str(b.dtype), tuple(int(d) for d in b.shape))
        for b in sch.mod["main"].body.block.alloc_buffers
    ]


def _int8_conv(size: int, kernel: int, *, relu: bool = False) -> Workload:
    """A u8 x s8 NHWC convolution (unpadded, 64 to 32 channels) as a model's lowering gives it: its
    weight ``[CO, KH, KW, CI]`` a layout-free constant, packed for the tiles at compile time, and
    a ReLU after it if asked. Checked against itself, unscheduled."""
    ci, co, wide = 64, 32, size + kernel - 1
    x = te.placeholder((1, wide, wide, ci), "uint8", name="X")
    w = te.placeholder((co, kernel, kernel, ci), "int8", name="W")
    ry, rx, rc = (
        te.reduce_axis((0, e), n) for e, n in [(kernel, "ry"), (kernel, "rx"), (ci, "rc")]
    )
    out = te.compute(
        (1, size, size, co),
        lambda n, y, x_, f: te.sum(
            x[n, y + ry, x_ + rx, rc].astype("int32") * w[f, ry, rx, rc].astype("int32"),
            axis=[ry, rx, rc],
        ),
        name="C",
    )
    if relu:
        out = te.compute(out.shape, lambda *i: tvm.tirx.max(out(*i), 0), name="relu")
    func = te.create_prim_func([x, w, out]).with_attr("layout_free_buffers", [1])
    return from_func(func, f"conv{kernel}x{kernel}{'_relu' if relu else ''}")


def _saturating_inputs(conv: Workload) -> list[np.ndarray]:
    """u8 255 against s8 127 and -128 in alternate channels: every pair of products past s16."""
    x, w = conv.random_inputs(0)
    x[...] = 255
    w[...] = np.where(np.arange(w.shape[-1]) % 2 == 0, 127, -128).astype(np.int8)
    return [x, w]


def _intrinsics(spaces) -> list[str]:
    return [
        str(inst.inputs[1])
        for space in spaces
        for inst in space.trace.insts
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == AUTO_TENSORIZE
    ]


@pytest.mark.parametrize(("K", "depth"), [(64, 1), (192, 3), (1024, 16)])
def test_the_tile_product_is_bit_exact_at_every_reduction_depth(K, depth, amx_target):
    workload, sch = _tensorized_gemm(64, 64, K, depth)
    lib = build(sch.mod, amx_target)
    assert "tdpbusd" in lib.mod.inspect_source("asm")
    for seed in range(2):
        run_and_check(lib, workload, seed=seed)


def test_a_kernel_of_one_call_per_block_zeroes_its_tiles_and_configures_each_thread_once():
    """Every call loaded the configuration (which zeroes all tiles and waits) and then its
    accumulators from a block the init had zeroed; the finished kernel does neither. Checked in the
    TIR compiled for Sapphire Rapids, on any host."""
    _, sch = _tensorized_gemm(64, 64, 128, 2)
    before = sch.mod.script()
    assert before.count("ldtilecfg") == 1 and "C_o_init" in before  # the intrinsic's own, per call
    finished = _finished(sch).script()
    assert finished.count("ldtilecfg") == 1
    parallel_body = finished.split("T.parallel(")[1]
    assert "ldtilecfg" in parallel_body.split("tdpbusd")[0], "one configuration per thread, first"
    assert finished.count("tilezero") == 4
    assert "C_o_init" not in finished
    assert finished.count("tileloadd64") + finished.count("tileloaddt164") == 4  # A's 2 and B's 2


def test_a_serial_tile_kernel_loads_its_configuration_once_before_its_loops(amx_target):
    """Without a parallel loop the calls run on the calling thread: one configuration, first."""
    workload, sch = _tensorized_gemm(64, 64, 128, 2, parallel=False)
    finished = _finished(sch)
    assert finished.script().count("ldtilecfg") == 1
    first = finished.body.block.body.seq[0]
    assert isinstance(first, tvm.tirx.AttrStmt) and first.attr_key == TILE_CONFIG
    lib = build(sch.mod, amx_target)
    run_and_check(lib, workload, inputs=adversarial_inputs(workload, 0, VNNI))


def test_a_reduction_of_several_calls_keeps_loading_its_accumulators():
    """K = 128 in 64-deep calls: the second call adds to what the first stored."""
    _, sch = _tensorized_gemm(64, 64, 128, 1)
    finished = _finished(sch).script()
    assert "tilezero" not in finished
    assert "C_o_init" in finished
    assert finished.count("tileloadd64") + finished.count("tileloaddt164") == 8


@pytest.mark.parametrize(("walk", "streamed", "kept"), [("columns", "B", "A"), ("rows", "A", "B")])
def test_the_operand_the_calls_walk_through_is_loaded_with_the_streaming_hint(walk, streamed, kept):
    """Along columns each call reads a new B panel once, and the next call reuses the A strip: B
    gets ``tileloaddt1``, which keeps it out of L1, so A stays there (and the other way along
    rows)."""
    tiles = {"A": ("T.uint8(4)", "T.uint8(5)"), "B": ("T.uint8(6)", "T.uint8(7)")}  # the impl's
    _, sch = _tensorized_gemm(64, 64, 128, 2, walk=walk)
    lines = _finished(sch).script().splitlines()
    hinted = [line for line in lines if "tileloaddt164" in line]
    plain = [line for line in lines if "tileloadd64" in line]
    assert sorted(t for line in hinted for t in tiles[streamed] if t in line) == [*tiles[streamed]]
    assert sorted(t for line in plain for t in tiles[kept] if t in line) == [*tiles[kept]]
    assert len(hinted) == len(plain) == 2


@pytest.mark.parametrize(("intrinsic", "staged"), [(intrinsic_name(2), False), (VNNI.name, True)])
def test_an_amx_block_writes_its_output_from_the_tiles_without_a_cache_stage(intrinsic, staged):
    """AMX's accumulators are tile registers, stored once per call: a ``cache_write`` buffer only
    copies the output. VNNI's register tile keeps its stage (compiled for Sapphire Rapids, on
    any host)."""
    ensure_registered()
    rules = [Tensorize(intrinsics=[intrinsic]), MultiLevelTiling(), AddCacheStage()]
    spaces = stock_design_spaces(workloads.gemm(M=64, N=64, K=128).func, rules, SAPPHIRE_RAPIDS)
    assert spaces
    assert all(("C_global" in space.mod.script()) == staged for space in spaces)


def test_the_finishing_pass_leaves_a_function_without_tile_calls_as_it_is(cpu_target):
    func = workloads.gemm(M=8, N=32, K=16).func.with_attr("target", cpu_target)
    mod = tvm.IRModule({"main": func})
    assert finish_amx_kernels()(mod)["main"].body.same_as(func.body)


@pytest.mark.parametrize(("K", "depth", "walk"), [(128, 2, "columns"), (128, 1, "rows")])
def test_finished_tile_kernels_are_bit_exact_on_adversarial_inputs(K, depth, walk, amx_target):
    workload, sch = _tensorized_gemm(64, 64, K, depth, walk=walk)
    lib = build(sch.mod, amx_target)
    for seed in range(2):
        run_and_check(lib, workload, inputs=adversarial_inputs(workload, seed, VNNI))


def test_on_an_amx_host_an_int8_gemm_gets_a_tile_space_beside_the_vnni_one(amx_target):
    """The deepest reduction that divides K without padding it: 768 = 12 x 64 (a 15-deep tile
    would pad 768 to 960, within the row-padding allowance but all wasted multiply-adds)."""
    spaces = stock_design_spaces(workloads.gemm(M=32, N=32, K=768).func, [Tensorize()], amx_target)
    assert sorted(_intrinsics(spaces)) == sorted([intrinsic_name(12), VNNI.name])


def test_rows_that_would_be_mostly_padding_stay_with_vnni(amx_target):
    """8 rows padded to AMX's 32 would quadruple the work: only the VNNI space is made."""
    spaces = stock_design_spaces(workloads.gemm(M=8, N=32, K=64).func, [Tensorize()], amx_target)
    assert _intrinsics(spaces) == [VNNI.name]


def test_a_cpu_that_is_not_this_host_gets_vnni_only(cpu_target):
    """Whether tile code may run is the running system's grant, so another CPU (here Zen 4, compiled
    for and not run) never gets AMX, whatever this host has; no skip, it holds on every host."""
    assert not has_amx(OTHER_CPU)
    spaces = stock_design_spaces(workloads.gemm(M=32, N=32, K=64).func, [Tensorize()], OTHER_CPU)
    assert _intrinsics(spaces) == [VNNI.name]
    assert not any(is_amx(name) for name in _intrinsics(spaces))


@pytest.mark.parametrize(("kernel", "gathered"), [(1, (64, 64)), (3, (3, 3, 64, 64))])
def test_a_convolution_on_a_small_feature_map_is_tiled_over_its_pixels_fused(kernel, gathered):
    """A 7 x 7 map's w padded to 32 rows would be 4.6x the work, past what AMX may pad; its 49
    pixels fused into one row iterator pad to 64. A 3 x 3 kernel's taps go ahead of the rows in
    the gathered input, so that each tap's rows are one strided tile. Compiled for Sapphire
    Rapids, on any host."""
    conv = _int8_conv(7, kernel)
    rule = Tensorize(intrinsics=[intrinsic_name(1)])
    spaces = stock_design_spaces(conv.func, [rule], SAPPHIRE_RAPIDS)
    assert _intrinsics(spaces) == [intrinsic_name(1)]
    allocated = _allocated(spaces[0])
    assert ("uint8", gathered) in allocated  # [taps, rows, channels]
    assert ("int32", (64, 32)) in allocated  # [rows, channels]


def test_a_gemm_has_no_pixels_to_fuse():
    """One row iterator: nothing to fuse, the schedule is left to the plain tile space."""
    workload = workloads.gemm(M=8, N=32, K=64)
    sch = Schedule(workload.func)
    assert as_gemm(sch, sch.get_sblock("C")) is None


def test_a_copy_back_whose_pixels_cannot_be_fused_leaves_the_view_unsettled():
    """Where the copy back cannot be laid out over the fused rows (here a loop of it split first,
    which ``transform_block_layout`` refuses), ``settle`` says so instead of raising: Tensorize then
    drops the tile space rather than build a copy back that reads ``r // 7, r % 7``."""
    sch = Schedule(_int8_conv(7, 1).func)
    gemm, view = as_gemm(sch, sch.get_sblock("C"))
    *_, channels = gemm.get_loops(view.scatter)
    gemm.split(channels, [None, 8])
    assert view.settle(gemm, gemm.get_sblock("C")) is False


def test_an_epilogue_runs_over_the_fused_pixels_inside_the_tile_loops():
    """The convolution's ReLU goes into the copy that reads the fused result back pixel by pixel,
    whose loops are fused the same way, so the cache stage rule puts it under the tile loops: one
    pass over memory, as for a convolution tiled as it is."""
    func = _int8_conv(7, 3, relu=True).func
    rules = [AlwaysInline(), Tensorize(intrinsics=[intrinsic_name(1)]), MultiLevelTiling()]
    rules.append(AddCacheStage(levels=(0,)))
    (space,) = stock_design_spaces(func, rules, SAPPHIRE_RAPIDS)
    (epilogue,) = [
        b
        for b in space.get_child_blocks(space.get_sblock("root"))
        if space.get(b).writes[0].source.name == "relu"
    ]
    assert [int(iv.dom.extent) for iv in space.get(epilogue).iter_vars] == [49, 32]
    assert "T.max" in space.get(epilogue).body.script()
    assert len(space.get_loops(epilogue)) > 2, space.mod.script()


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("kernel", [1, 3])
def test_fused_pixel_tile_kernels_are_bit_exact_on_saturating_inputs(kernel, relu, amx_target):
    """Tile kernels HeronSearch samples for the convolutions above (every rule of HeronSpace, and
    its postprocs), built and run here."""
    conv = _int8_conv(7, kernel, relu=relu)
    space = HeronSpace(include_default_spaces=False)
    strategy = started_search(conv.func, amx_target, trials=8, per_round=8, space=space)
    tiles = [c.sch for c in strategy.generate_measure_candidates() if "amx" in str(c.sch.trace)]
    assert tiles, "no tile kernel sampled"
    for sch in tiles[:2]:
        lib = build(sch.mod, amx_target)
        run_and_check(lib, conv, inputs=_saturating_inputs(conv))
        run_and_check(lib, conv, seed=1)


def test_the_amx_peak_needs_amx_and_names_why():
    with pytest.raises(
        TargetError, match="amx_peak_gops\\(\\) needs AMX tiles this process may use"
    ):
        amx_peak_gops(OTHER_CPU)


def test_int8_bounds_use_the_amx_peak_where_tiles_run(amx_target):
    """Bounds held against the VNNI peak would call a tile kernel "at its bound" while it runs at a
    fraction of the tile units' rate, and the budget split would stop tuning it."""
    unit, peak = int8_peak(amx_target)
    assert unit == "AMX"
    assert peak > 2 * dot_peak_gops(amx_target, VNNI)


def test_tuning_measures_tile_kernels_in_the_runner_workers(amx_target, tmp_path):
    """The runner's worker processes get the OS's tile grant (a worker without it dies on the first
    tile instruction, and every AMX candidate would be recorded as failed); the best AMX record
    replays and computes what numpy computes."""
    workload = workloads.gemm(M=64, N=64, K=128)
    db = tune_workload(workload, amx_target, str(tmp_path), 16, num_trials_per_iter=8, seed=0)
    amx_runs = [r.run_secs for r in db.get_all_tuning_records() if "amx" in str(r.trace)]
    assert amx_runs, "no AMX candidate was measured"
    assert any(min(float(s) for s in secs) < 1.0 for secs in amx_runs), "every AMX candidate failed"
    lib = build(best_schedule(db, workload, amx_target).mod, amx_target)
    run_and_check(lib, workload, seed=1)


_RUN_EXPORTED = """
import sys
import numpy as np
import tvm
if sys.argv[2] == "import ms_heron":
    import ms_heron
lib = tvm.runtime.load_module(sys.argv[1])
a = np.ones((64, 64), "uint8"); w = np.ones((4, 16, 16, 4), "int8"); c = np.zeros((64, 64), "int32")
out = tvm.runtime.tensor(c)
lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(w), out)
print(int(out.numpy()[0, 0]))
"""


def test_a_process_runs_tile_code_once_it_imported_ms_heron(amx_target, tmp_path):
    """Linux kills a process whose first tile instruction it was not asked to allow (SIGILL);
    importing ms_heron asks. Shown on one exported kernel, run in a fresh process each way."""
    _, sch = _tensorized_gemm(64, 64, 64, 1)
    path = tmp_path / "amx_gemm.so"
    build(sch.mod, amx_target).export_library(str(path))

    def run(prelude: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", _RUN_EXPORTED, str(path), prelude],
            capture_output=True,
            text=True,
            timeout=300,
        )

    granted = run("import ms_heron")
    assert granted.returncode == 0, granted.stderr[-2000:]
    assert granted.stdout.strip().splitlines()[-1] == "64"
    refused = run("")
    assert refused.returncode == -4, (refused.returncode, refused.stderr[-2000:])  # SIGILL
