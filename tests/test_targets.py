"""Hardware facts come from the Target."""

import re
import subprocess
import sys

import pytest
import tvm
from tvm.target import Target

from ms_heron.hardware.dot_products import VNNI, dot_product
from ms_heron.hardware.peak import dot_chains, fma_chains, fma_peak_gops
from ms_heron.hardware.probes import fma_kernel
from ms_heron.hardware.targets import (
    CACHES_ENV,
    GpuLimits,
    TargetError,
    cpu_cache_bytes,
    has_vnni,
    narrowed,
    num_cores,
    parse_target,
    runs_here,
    target_json,
    usable_cores,
    vector_bytes,
    vector_registers,
)


def test_host_target_is_complete(cpu_target):
    assert cpu_target.kind.name == "llvm"
    assert num_cores(cpu_target) >= 1
    assert cpu_target.attrs["mcpu"]


def test_vnni_from_features_not_names():
    assert has_vnni(Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}))
    assert has_vnni(Target({"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2}))
    assert not has_vnni(Target({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}))
    assert not has_vnni(parse_target("nvidia/nvidia-h100"))


def test_vector_width(cpu_target):
    assert vector_bytes(Target({"kind": "llvm", "mcpu": "haswell"})) == 32
    assert vector_registers(Target({"kind": "llvm", "mcpu": "haswell"})) == 16  # AVX2: ymm0-15
    assert vector_registers(Target({"kind": "llvm", "mcpu": "skylake-avx512"})) == 32
    assert vector_bytes(cpu_target) in (32, 64)


def test_gpu_limits_from_tag():
    h100 = GpuLimits.of(parse_target("nvidia/nvidia-h100"))
    assert h100.max_shared_memory_per_block == 49152
    assert h100.max_threads_per_block == 1024
    assert h100.warp_size == 32
    assert h100.arch.startswith("sm_90")


def test_runtime_uses_every_physical_core():
    """TVM's pool defaults to half the logical CPUs on x86; ms_heron makes it use every physical
    core."""
    import psutil
    import tvm

    assert tvm.runtime.num_threads() == psutil.cpu_count(logical=False)


def test_fma_peak_kernel_issues_full_width_fmas(cpu_target):
    """The fp32 peak is measured with the target's widest vector FMA (a number, not a constant)."""
    lanes = vector_bytes(cpu_target) // 4
    lib = tvm.compile(fma_kernel(2, 1000, lanes), target=cpu_target)  # too few iterations fold away
    asm = lib.mod.inspect_source("asm")
    register = {16: "zmm", 8: "ymm"}[lanes]
    assert re.search(rf"vfmadd\w+\s+%{register}", asm)
    assert fma_peak_gops(cpu_target, iters=100_000) > 0


def test_a_peak_is_measured_once_per_target_whatever_object_holds_it(cpu_target):
    """A run reopened holds an equal Target of its own: one report's shares of bound must hold one
    peak, not two measured at different moments of the host's load."""
    rebuilt = Target(target_json(cpu_target))
    assert rebuilt is not cpu_target
    assert fma_peak_gops(rebuilt, iters=100_000) == fma_peak_gops(cpu_target, iters=100_000)


def test_a_peak_measured_again_keeps_the_higher_measurement(cpu_target):
    """A busy core only slows a probe: measured again, a peak keeps the higher of its two
    measurements, for every holder of an equal target."""
    try:
        fma_peak_gops.assume(cpu_target, 1.0, iters=100_000)  # as a probe on a busy core left it
        assert fma_peak_gops(cpu_target, iters=100_000) == 1.0
        again = fma_peak_gops.again(Target(target_json(cpu_target)), iters=100_000)
        assert again > 1.0 and fma_peak_gops(cpu_target, iters=100_000) == again
        fma_peak_gops.assume(cpu_target, 10 * again, iters=100_000)
        assert fma_peak_gops.again(cpu_target, iters=100_000) == 10 * again
    finally:
        fma_peak_gops.cache_clear()


def test_fma_and_vpdpbusd_chains_are_measured_on_the_host_and_assumed_elsewhere(cpu_target):
    """Independent FMA (and ``vpdpbusd``) chains one core keeps in flight (latency x ports):
    measured here, where one chain must be several times slower per step than many; 8 (10) for a
    CPU that is not this one."""
    assert 2 <= fma_chains(cpu_target) <= 12
    dot = dot_product(cpu_target)
    if dot is not None and dot.form == "vpdpbusd":
        assert 2 <= dot_chains(cpu_target, dot) <= 12
    # an Arm CPU: any x86 one may run here (x86-64-v4 code runs on a Zen 4, whose zmm FMA needs 4
    # chains)
    other = Target(
        {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-v1", "num-cores": 2}
    )
    assert not runs_here(other) and fma_chains(other) == 8 and dot_chains(other, VNNI) == 10


def test_cores_respect_cpu_affinity_and_the_container_quota(tmp_path):
    """``taskset -c 0`` and a cgroup quota of 1.5 CPUs both cap what host_target() counts."""
    pinned = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; os.sched_setaffinity(0, {0}); "
            "from ms_heron.hardware.targets import usable_cores; print(usable_cores())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert pinned.stdout.strip() == "1"
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")
    assert usable_cores(str(quota)) == min(2, usable_cores())
    quota.write_text("max 100000\n")
    assert usable_cores(str(quota)) == usable_cores(str(tmp_path / "absent"))


def test_cache_sizes_of_another_cpu_come_from_the_environment(monkeypatch, cpu_target):
    other = Target(
        {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1", "num-cores": 4}
    )
    host = cpu_cache_bytes(cpu_target)
    monkeypatch.setenv(CACHES_ENV, "L1=32K,L2=256K")
    assert cpu_cache_bytes(other) == {"L1": 32 * 1024, "L2": 256 * 1024}
    assert cpu_cache_bytes(cpu_target) == host  # the host's own are read from it
    # code for a narrower instruction set runs here, so it meets this host's caches
    assert cpu_cache_bytes(narrowed(cpu_target, "avx2")) == host
    monkeypatch.setenv(CACHES_ENV, "L1=lots")
    with pytest.raises(
        TargetError,
        match=r"MS_HERON_CPU_CACHES='L1=lots': write the target CPU's per-core data caches as "
        r"L1=32K,L2=1M",
    ):
        cpu_cache_bytes(other)
