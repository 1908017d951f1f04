"""Shared fixtures: the CPU target and small instances of every workload family."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from ms_heron import workloads
from ms_heron.hardware.dot_products import dot_product, native_dtype
from ms_heron.hardware.targets import cpu_name, has_amx, has_vnni, host_target
from ms_heron.relax import compile_model, from_onnx
from ms_heron.tuning.store import STORE_ENV

#: Small shapes of every family that still exercise their index arithmetic (stride, pad, dilation).
SMALL_SHAPES = {
    "gemm": dict(M=8, N=32, K=16),
    "bmm": dict(B=2, M=8, N=16, K=8),
    "gemv": dict(M=32, K=8),
    "c1d": dict(N=1, W=10, CI=8, CO=16, KW=3, pad=2, dilation=2),
    "c2d": dict(N=1, H=6, W=6, CI=8, CO=16, KH=3, KW=3, stride=2, pad=1),
    "c3d": dict(N=1, D=4, H=4, W=4, CI=4, CO=16, KD=3, KH=3, KW=3, pad=1),
    "dil": dict(N=1, H=8, W=8, CI=4, CO=16, KH=3, KW=3),
    "t2d": dict(N=1, H=4, W=4, CI=8, CO=16, KH=4, KW=4, stride=2, pad=1),
    "scan": dict(B=2, M=8, N=16),
}


#: The suite form this machine tunes by default: int8 where it has an x86 dot product (AVX2 on),
#: else fp32. Tests whose subject is not int8 (resume, budgets, RPC, merging) use it.
HOST_DTYPE = native_dtype(host_target())
#: This machine's int8 dot product (None: no AVX2).
HOST_DOT = dot_product(host_target())


def suite(family: str, dtype: str = HOST_DTYPE, **shape):
    """A suite workload as this machine tunes it: an int8 weight packed for its dot product."""
    return workloads.make(family, dtype, target=host_target(), **shape)


@pytest.fixture(autouse=True)
def _own_records_store(tmp_path_factory, monkeypatch):
    """Each test its own default records store (and the commands it runs): a task one test tuned
    is not taken from the store in another."""
    monkeypatch.setenv(STORE_ENV, str(tmp_path_factory.mktemp("records_store")))


@pytest.fixture(scope="session")
def cpu_target():
    """This machine."""
    return host_target()


@pytest.fixture(scope="session")
def int8_target(cpu_target):
    """This machine, for tests that run int8 kernels on its dot product (AVX2 and up); skipped, and
    reported so, on a CPU without one."""
    if HOST_DOT is None:
        pytest.skip(f"the host CPU ({cpu_name(cpu_target)}) has no x86 dot product (AVX2 or later)")
    return cpu_target


@pytest.fixture(scope="session")
def vnni_target(cpu_target):
    """This machine, for tests that run VNNI code; skipped, and reported so, on a CPU without it
    (Zen 3 has AVX2 only)."""
    if not has_vnni(cpu_target):
        pytest.skip(f"the host CPU ({cpu_name(cpu_target)}) has no AVX-512 VNNI to run vpdpbusd on")
    return cpu_target


@pytest.fixture(scope="session")
def amx_target(vnni_target):
    """This machine, for tests that run AMX tile code; skipped, and reported so, where the CPU has
    no AMX-INT8 or the OS refuses this process the tile state (Zen 4 and 5 have none)."""
    if not has_amx(vnni_target):
        pytest.skip(f"the host CPU ({cpu_name(vnni_target)}) runs no AMX tile code here")
    return vnni_target


def untuned(model, target):
    """An ONNX model compiled with no tuning records (every kernel TVM's default schedule)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # every task runs untuned here
        return compile_model(ms.database.MemoryDatabase(), from_onnx(model), None, target)


def assert_same_outputs(before: tvm.IRModule, after: tvm.IRModule, inputs: np.ndarray):
    """A rewritten Relax module computes exactly what it computed, compiled as it stands."""
    outputs = []
    for mod in (before, after):
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        result = vm["main"](tvm.runtime.tensor(inputs))
        outputs.append(
            [o.numpy() for o in (result if isinstance(result, tvm.ir.Array) else [result])]
        )
    for got, expected in zip(*outputs):
        np.testing.assert_array_equal(got, expected)


def op_bindings(mod, name: str) -> list[relax.VarBinding]:
    """``main``'s bindings of a call of op ``name``, in order."""
    return [
        binding
        for block in mod["main"].body.blocks
        for binding in block.bindings
        if isinstance(binding.value, relax.Call) and binding.value.op.name == name
    ]


def kernel_calls(lowered) -> list[str]:
    """The kernels ``main`` calls, in order, one entry per call."""
    return [b.value.args[0].name_hint for b in op_bindings(lowered, "relax.call_tir")]


def timing_out_runner():
    """A real LocalRunner whose every measurement exceeds its time limit.

    Its constructor makes a sanity call under the same limit, which a loaded machine misses at
    100 microseconds, so the limit is lowered once the runner exists.
    """
    runner = ms.runner.LocalRunner(timeout_sec=60)
    runner.timeout_sec = 1e-4
    runner.pool._timeout = 1e-4  # pylint: disable=protected-access  # PopenPoolExecutor's per-call limit
    return runner


def _command(args) -> list[str]:
    return [sys.executable, "-m", "ms_heron.cli", *map(str, args)]


def ms_heron_cli(*args, timeout=600, cwd=None) -> subprocess.CompletedProcess:
    """The ``ms-heron`` command as a user runs it: a subprocess, output captured."""
    return subprocess.run(_command(args), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def ms_heron_clis(*commands, timeout=600) -> list[subprocess.CompletedProcess]:
    """Several ``ms-heron`` commands run side by side (most of a small run is start-up), in
    order."""
    procs = [
        subprocess.Popen(_command(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in commands
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done
