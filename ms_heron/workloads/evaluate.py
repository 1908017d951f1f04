"""Compile a scheduled workload, check it against its numpy reference, and time it.

Every figure ms_heron prints goes through here, so tuned kernels and baselines are timed the same
way: TVM's ``time_evaluator`` with a minimum repeat time, median of the repeats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm.target import Target

from ..codegen import tir_pipeline
from .workload import Workload


class WrongResult(AssertionError):
    """A compiled kernel whose output differs from the workload's numpy reference."""


@dataclass(frozen=True)
class Timing:
    """A kernel's measured seconds per call and its operation count."""

    seconds: float
    ops: int

    @property
    def gops(self) -> float:
        return self.ops / self.seconds / 1e9


def _tensors(arrays, dev):
    return [tvm.runtime.tensor(a, dev) for a in arrays]


def check_output(workload: Workload, got: np.ndarray, expected: np.ndarray) -> None:
    """Bit-exact for integer forms; fp tolerances scale with the reduction length."""
    if workload.output_dtype.startswith("int"):
        if not np.array_equal(got, expected):
            bad = np.count_nonzero(got != expected)
            raise WrongResult(f"{workload.name}: {bad} of {got.size} int outputs differ from numpy")
        return
    tol = 1e-2 if workload.dtype == "fp16" else 1e-4
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(got.astype(np.float64) - expected).max())
    if not err <= tol * scale:
        raise WrongResult(f"{workload.name}: max abs error {err:.3g} exceeds {tol * scale:.3g}")


def build(mod: tvm.IRModule | tvm.tirx.PrimFunc, target: Target) -> tvm.runtime.Executable:
    return tvm.compile(mod, target=target, tir_pipeline=tir_pipeline(target))


def run_and_check(
    lib, workload: Workload, seed: int = 0, *, inputs: list[np.ndarray] | None = None
) -> None:
    """Run the compiled ``lib`` once on ``inputs`` (default: the workload's random inputs for
    ``seed``) and compare with the reference."""
    dev = tvm.cpu()
    inputs = workload.random_inputs(seed) if inputs is None else inputs
    out = tvm.runtime.tensor(np.zeros(workload.output_shape, workload.output_dtype), dev)
    lib["main"](*_tensors(inputs, dev), out)
    check_output(workload, out.numpy(), workload.reference(inputs))


def time_lib(lib, workload: Workload, repeat: int = 10, min_repeat_ms: int = 100) -> Timing:
    """Median latency of the compiled ``lib`` on the CPU."""
    dev = tvm.cpu()
    args = _tensors(workload.random_inputs(0), dev)
    out = tvm.runtime.tensor(np.zeros(workload.output_shape, workload.output_dtype), dev)
    timer = lib.mod.time_evaluator(
        "main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms
    )
    return Timing(float(timer(*args, out).median), workload.ops)
