"""The x86 dot-product intrinsics: each is chosen from the target's features, tensorizes, emits its
instruction and is bit-exact, adversarial inputs included; TVM's repaired VNNI name builds too.

Each runs where the host executes its instruction (a kernel compiled for a narrower CPU runs on a
wider one: ``haswell`` anywhere here) and is compiled, not run, elsewhere; a skip names the CPU."""

import json
import subprocess
import sys

import numpy as np
import pytest
from tvm.s_tir import Schedule, TensorIntrin
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ms_heron import HeronSearch, HeronSpace, workloads
from ms_heron.hardware.dot_products import DOT_PRODUCTS, VNNI, dot_product, native_dtype, require_dot_product
from ms_heron.hardware.peak import dot_peak_gops, fma_peak_gops
from ms_heron.hardware.targets import TargetError, cpu_name, host_target, target_json
from ms_heron.intrinsics import TVM_VNNI_INTRIN, ensure_registered
from ms_heron.workloads.evaluate import build, run_and_check

#: An mcpu of each dot product's CPUs, best first like DOT_PRODUCTS.
MCPU = {
    "AVX-512 VNNI": "cascadelake",
    "AVX-VNNI": "alderlake",
    "AVX-512BW": "skylake-avx512",
    "AVX2": "haswell",
}


def _target(dot):
    return Target({"kind": "llvm", "mcpu": MCPU[dot.isa], "num-cores": 2})


def _tensorized_dense(intrin, tile, M=32, N=64, K=32):
    lanes, red = tile
    workload = workloads.gemm(M=M, N=N, K=K, tile=tile)
    sch = Schedule(workload.func)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    j_outer, j_lane = sch.split(j, [None, lanes])
    k_outer, k_lane = sch.split(k, [None, red])
    sch.reorder(i, j_outer, k_outer, j_lane, k_lane)
    sch.decompose_reduction(block, k_outer)
    sch.tensorize(j_lane, intrin)
    return workload, sch


def _adversarial(workload, seed):
    """u8 255 against s8 127 in one half of the weight rows and -128 in the other: every adjacent
    pair of products is 2 x 255 x 127 = 64770 or 2 x 255 x -128 = -65280, past s16 (what
    ``vpmaddubsw`` would saturate); the rest of the seeds are random."""
    a, w = workload.random_inputs(seed)
    if seed == 0:
        a[...] = 255
        w[...] = np.where(np.arange(w.shape[-2])[:, None] % 2 == 0, 127, -128).astype(w.dtype)
    return [a, w]


def test_each_cpu_gets_its_best_dot_product_from_its_llvm_features():
    for dot in DOT_PRODUCTS:
        assert dot_product(_target(dot)) == dot
    assert dot_product(Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})) == VNNI
    assert dot_product(Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})).isa == "AVX2"
    assert dot_product(Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 2})) is None
    for dot in DOT_PRODUCTS:  # int8 is every one's native form: 2-4 products per lane per instruction
        assert native_dtype(_target(dot)) == "int8"


def test_a_cpu_without_avx2_is_refused_naming_it():
    with pytest.raises(TargetError, match="'x86-64' has none; use an mcpu such as 'haswell'"):
        require_dot_product(Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 2}))


@pytest.mark.parametrize("dot", DOT_PRODUCTS, ids=lambda d: d.isa)
def test_every_dot_product_tensorizes_emits_its_instruction_and_is_bit_exact(dot):
    ensure_registered()
    target = _target(dot)
    workload, sch = _tensorized_dense(dot.name, dot.tile)
    lib = build(sch.mod, target)
    asm = lib.mod.inspect_source("asm")
    assert dot.mnemonic in asm
    assert "vpmaddubsw" not in asm  # the saturating byte multiply is never used
    if not dot.runs_on(host_target()):
        pytest.skip(
            f"compiled for {MCPU[dot.isa]}; the host CPU ({cpu_name(host_target())}) has no {dot.isa} to run it"
        )
    for seed in range(3):
        run_and_check(lib, workload, inputs=_adversarial(workload, seed))


def test_tvm_vnni_name_builds_and_is_bit_exact_where_the_host_has_vnni(vnni_target):
    ensure_registered()
    workload, sch = _tensorized_dense(TVM_VNNI_INTRIN, VNNI.tile)
    lib = build(sch.mod, vnni_target)
    assert "vpdpbusd" in lib.mod.inspect_source("asm")
    for seed in range(3):
        run_and_check(lib, workload, seed=seed)


def test_the_int8_peak_is_measured_with_the_hosts_dot_product_and_beats_fp32_where_int8_is_native(cpu_target):
    dot = dot_product(cpu_target)
    if dot is None:
        pytest.skip(f"the host CPU ({cpu_name(cpu_target)}) has no x86 dot product")
    int8, fp32 = dot_peak_gops(cpu_target), fma_peak_gops(cpu_target)
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


def test_an_int8_record_compiles_with_stock_compile_tir_in_a_process_that_only_imported_ms_heron(tmp_path):
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
    candidate = next(c for c in strategy.generate_measure_candidates() if VNNI.name in str(c.sch.trace))
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    db.commit_tuning_record(
        ms.database.TuningRecord(candidate.sch.trace, db.commit_workload(ctx.mod), [1e-3], target, candidate.args_info)
    )
    replay = subprocess.run(
        [sys.executable, "-c", _REPLAY, str(tmp_path), json.dumps(target_json(target))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr[-2000:]
    assert replay.stdout.strip().splitlines()[-1] == "True"
