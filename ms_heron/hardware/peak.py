"""Measured facts of the machine: int8 (AMX, or the CPU's dot product) and fp32 FMA throughput,
memory bandwidth, FMA latency.

They give "% of peak" figures and each model task's bound (what the budget split holds its best
kernel against). The numbers come from the probe kernels of :mod:`ms_heron.hardware.probes`
(independent accumulator chains of AMX tile products, dot products or vector FMAs on every core; a
load stream larger than the caches), so they need no C compiler, follow the Target's vector width
and reflect the clock the machine runs at right now. Each is measured once per process and target
(:func:`once_per_target`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Literal, TypeVar

import numpy as np
from tvm import DataType, IRModule
from tvm.s_tir.analysis import estimate_tir_flops
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.target import Target

from .dot_products import (
    DotProduct,
    dot_product,
    dot_products,
    kernel_dot_product,
    require_dot_product,
)
from .probes import (
    FMA_COEF,
    PEAK_CHAINS,
    amx_kernel,
    best_seconds,
    dot_kernel,
    fma_kernel,
    read_kernel,
)
from .targets import (
    TargetError,
    has_amx,
    largest_cache_bytes,
    num_cores,
    runs_here,
    target_json,
    vector_bytes,
)

_OPS_PER_TILE_PRODUCT = 2 * 16 * 16 * 64  # one tdpbusd: a 16 x 16 int32 tile over 64 steps
_AMX_TILE_PRODUCTS = 4  # per iteration of the AMX probe
#: What :func:`fma_chains` answers for a CPU that is not this host (a 4-cycle FMA on 2 ports).
_DEFAULT_FMA_CHAINS = 8
#: What :func:`dot_chains` answers for a CPU that is not this host.
_DEFAULT_DOT_CHAINS = 10

Probe = TypeVar("Probe", bound=Callable)


def once_per_target(probe: Probe) -> Probe:
    """Measure ``probe`` once per process for each target, by its content: Target objects compare
    by identity, and a target rebuilt (a run reopened, a baseline arm's) would be measured again at
    another moment of the host's load, so that one report's shares of bound held two peaks.

    ``again(target, ...)`` measures once more and keeps the higher of the two, for a peak: a probe
    that shared a core with another process (a build worker starting) measures too little, never
    too much. ``assume(target, value, ...)`` stands for such a measurement (tests)."""
    measurements: dict[tuple, float] = {}

    def key(target: Target, args, kwargs) -> tuple:
        return (
            json.dumps(target_json(target), sort_keys=True),
            args,
            tuple(sorted(kwargs.items())),
        )

    @functools.wraps(probe)
    def measured(target: Target, *args, **kwargs):
        k = key(target, args, kwargs)
        if k not in measurements:
            measurements[k] = probe(Target(json.loads(k[0])), *args, **kwargs)
        return measurements[k]

    def again(target: Target, *args, **kwargs):
        k = key(target, args, kwargs)
        value = probe(Target(json.loads(k[0])), *args, **kwargs)
        measurements[k] = max(value, measurements.get(k, value))
        return measurements[k]

    def assume(target: Target, value, *args, **kwargs) -> None:
        measurements[key(target, args, kwargs)] = value

    measured.cache_clear = measurements.clear  # measure again (a test's fresh samples)
    measured.again, measured.assume = again, assume
    return measured  # type: ignore[return-value]


@once_per_target
def dot_peak_gops(target: Target, dot: DotProduct | None = None, iters: int = 2_000_000) -> float:
    """Peak u8 x s8 -> s32 GOPS of the dot product ``dot`` (None: the target's best) over all of
    the target's cores, measured now (about 0.1 s), in code compiled for its instruction set alone
    (:meth:`DotProduct.own_target`)."""
    dot = dot or require_dot_product(target)
    _require_runs_here(target, "dot_peak_gops")
    cores = num_cores(target)
    best = best_seconds(
        dot_kernel(dot, cores, iters),
        dot.own_target(target),
        np.array([0x01010101, 0x01010101], "int32"),
        (cores, dot.lanes),
    )
    return cores * iters * PEAK_CHAINS * dot.ops_per_step / best / 1e9


@once_per_target
def amx_peak_gops(target: Target, iters: int = 200_000) -> float:
    """Peak u8 x s8 -> s32 GOPS of AMX tile products over all of the target's cores, measured
    now."""
    if not has_amx(target):
        raise TargetError(
            f"amx_peak_gops() needs AMX tiles this process may use; {target} has none here"
        )
    cores = num_cores(target)
    best = best_seconds(amx_kernel(cores, iters), target, np.zeros(2, "int32"), (cores, 256))
    return float(cores * iters * _AMX_TILE_PRODUCTS * _OPS_PER_TILE_PRODUCT / best / 1e9)


def int8_peak(
    target: Target, dot: DotProduct | None = None, *, anew: bool = False
) -> tuple[str, float]:
    """The int8 unit the kernels use on ``target`` and its measured peak GOPS: AMX where this host
    runs tile code, else the dot product ``dot`` (None: the CPU's best exact one, "AVX-512 VNNI"
    ... "AVX2"). ``anew``: measured now, not the process's first measurement
    (:func:`unit_peak`)."""
    if has_amx(target):
        return "AMX", (amx_peak_gops.__wrapped__ if anew else amx_peak_gops)(target)
    dot = dot or require_dot_product(target)
    return dot.isa, (dot_peak_gops.__wrapped__ if anew else dot_peak_gops)(target, dot)


def unit_peak(
    target: Target,
    dtype: Literal["int8", "fp32"],
    dot: DotProduct | None = None,
    *,
    anew: bool = False,
) -> tuple[str, float]:
    """The unit a kernel of ``dtype`` runs on (:func:`int8_peak`'s, or "FMA") and its peak GOPS.

    Parameters
    ----------
    dot
        For int8 without AMX: the dot product (None: the CPU's best exact one).
    anew
        Measure it now instead of keeping the process's first measurement. A benchmark times it
        in turn with the kernels it holds against it: a shared host's speed drifts by a third from
        one minute to the next, so a share of a peak taken at another moment measures the host as
        much as the kernel.
    """
    if dtype == "int8":
        return int8_peak(target, dot, anew=anew)
    return "FMA", (fma_peak_gops.__wrapped__ if anew else fma_peak_gops)(target)


@once_per_target
def fma_peak_gops(target: Target, iters: int = 2_000_000) -> float:
    """Peak fp32 GOPS (2 per fused multiply-add lane) over all of the target's cores, measured
    now."""
    _require_runs_here(target, "fma_peak_gops")
    cores, lanes = num_cores(target), vector_bytes(target) // 4
    best = best_seconds(fma_kernel(cores, iters, lanes), target, FMA_COEF, (cores, lanes))
    return cores * iters * PEAK_CHAINS * lanes * 2 / best / 1e9


def _require_runs_here(target: Target, what: str) -> None:
    if not runs_here(target):
        raise TargetError(f"{what}() measures this machine; code for {target} does not run on it")


#: The bandwidth probe streams at least this much, and twice the largest cache the host reports (a
#: stream twice a cache's size leaves none of itself in it for the next run).
_MIN_STREAM_BYTES = 256 << 20


@once_per_target
def memory_bandwidth_gbps(target: Target) -> float:
    """Read bandwidth from memory over all of the target's cores in GB/s, measured now (a few s):
    every core sums its share of an array twice the size of the host's largest cache."""
    _require_runs_here(target, "memory_bandwidth_gbps")
    cores, lanes = num_cores(target), vector_bytes(target) // 4
    per_core = max(_MIN_STREAM_BYTES, 2 * largest_cache_bytes()) // 4 // cores
    per_core -= per_core % (4 * lanes)
    # written, not calloc'ed (untouched zero pages all map to one page and read from cache); a
    # constant fills the stream in a fraction of the seconds random numbers take
    stream = np.full(cores * per_core, 1.0, dtype="float32")
    # two bursts: one run streams twice the largest cache, long enough to span the host's swings
    seconds = best_seconds(
        read_kernel(cores, per_core, lanes), target, stream, (cores, lanes), bursts=2
    )
    return cores * per_core * 4 / seconds / 1e9


@once_per_target
def flops_per_byte(target: Target) -> float:
    """The host's fp32 FMA peak over its memory bandwidth (flops per byte: its machine balance),
    kept at its first value in a process, since choices made from it (:mod:`ms_heron.relax.passes.
    winograd`'s) must not change when a peak is measured again; infinite for a target that does not
    run here."""
    if not runs_here(target):
        return math.inf
    return fma_peak_gops(target) / memory_bandwidth_gbps(target)


def bound_parts(mod: IRModule, target: Target) -> tuple[float, float]:
    """The kernel's flops at the FMA peak (for a kernel of 8- or 16-bit integers on an x86 CPU,
    the :func:`int8_peak` of the dot product it may use, :func:`kernel_dot_product`: on narrow
    weights without VNNI, the byte multiply's, up to twice the exact form's work per instruction),
    and its arguments' bytes once through memory at the measured bandwidth, in seconds; zeros for a
    target that is not this machine. A kernel much faster than the first was timed against a peak
    measured too low (:func:`measure_peaks_again`)."""
    if not runs_here(target):
        return 0.0, 0.0
    args = ArgInfo.from_prim_func(mod["main"])
    moved = sum(math.prod(int(d) for d in a.shape) * DataType(a.dtype).itemsize for a in args)
    # s16 operands: an int8 convolution's Winograd domain, on the dot product's own instruction
    int8 = (
        any(str(a.dtype) in ("int8", "uint8", "int16") for a in args)
        and dot_product(target) is not None
    )
    peak = int8_peak(target, kernel_dot_product(mod["main"], target)) if int8 else None
    ops_per_s = (peak[1] if peak else fma_peak_gops(target)) * 1e9
    return (
        float(estimate_tir_flops(mod) / ops_per_s),
        moved / (memory_bandwidth_gbps(target) * 1e9),
    )


def measure_peaks_again(target: Target) -> None:
    """Measure the target's compute peaks (fp32 FMA, and AMX or the dot product) once more, each
    keeping the higher of its two measurements (:func:`once_per_target`)."""
    fma_peak_gops.again(target)
    if has_amx(target):
        amx_peak_gops.again(target)
    else:
        for dot in dot_products(target):
            if not dot.s16_values:  # the forms bounds are made from
                dot_peak_gops.again(target, dot)


#: A kernel this much faster than the compute part of its bound has shown the measured peak low.
#: Kernels may read a few percent fast (the best of many noisy timings); none is 10% past a peak.
BEYOND_PEAK = 1.1


def beats_the_peak(compute_s: float, best_s: float) -> bool:
    """Whether a kernel of ``best_s`` seconds ran more than :data:`BEYOND_PEAK` times faster than
    its flops at the measured peak (``compute_s``) allow: the peak was measured low, by a probe
    that shared its core (:func:`measure_peaks_again`)."""
    return compute_s > BEYOND_PEAK * best_s


def share_of_bound(bound_s: float, best_s: float) -> float:
    """How close a kernel of ``best_s`` seconds runs to its bound: 1.0 at it, 0 for no kernel."""
    return bound_s / best_s if best_s < math.inf else 0.0


@once_per_target
def fma_chains(target: Target, iters: int = 200_000) -> int:
    """Independent vector-FMA accumulators one core needs to issue an FMA on every port every cycle:
    FMA latency x FMA ports (BLIS's ``N_vfma x L_vfma``), measured on the host
    (:func:`_chains_needed`). Another CPU than the host gets 8 (a 4-cycle FMA on 2 ports)."""
    if not runs_here(target):
        return _DEFAULT_FMA_CHAINS
    lanes = vector_bytes(target) // 4
    return _chains_needed(
        lambda chains: best_seconds(
            fma_kernel(1, iters, lanes, chains), target, FMA_COEF, (1, lanes)
        )
    )


@once_per_target
def dot_chains(target: Target, dot: DotProduct, iters: int = 200_000) -> int:
    """:func:`fma_chains` for the dot product ``dot``, which must accumulate in place
    (``vpdpbusd``: its latency is the chain's; the widening forms' chain is their ``vpaddd``).
    Another CPU than the host gets 10 (a 5-cycle ``vpdpbusd`` on 2 ports, Intel's since Ice
    Lake)."""
    if not runs_here(target):
        return _DEFAULT_DOT_CHAINS
    coef = np.array([0x01010101, 0x01010101], "int32")
    return _chains_needed(
        lambda chains: best_seconds(dot_kernel(dot, 1, iters, chains), target, coef, (1, dot.lanes))
    )


def _chains_needed(seconds_with: Callable[[int], float]) -> int:
    """Latency x ports of an instruction, from its probe's time with ``chains`` independent
    accumulators (``seconds_with(chains)``): one chain's time over the time per step of
    :data:`PEAK_CHAINS` chains (about 0.1 s, once per process)."""
    one, many = seconds_with(1), seconds_with(PEAK_CHAINS) / PEAK_CHAINS
    return max(1, min(PEAK_CHAINS, round(one / many)))
