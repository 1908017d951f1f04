"""Measured peak throughput of the machine (int8 VNNI and fp32 FMA), for "% of peak" figures.

The numbers come from the probe kernels of :mod:`ms_heron.probes` (independent accumulator
chains of ``vpdpbusd`` or of vector FMAs on every core), so they need no C compiler, follow the
Target's vector width and reflect the clock the machine runs at right now.
"""

from __future__ import annotations

import functools

import numpy as np
from tvm.target import Target

from ..probes import FMA_COEF, PEAK_CHAINS, best_seconds, fma_kernel, vnni_kernel
from ..targets import num_cores, require_vnni, vector_bytes

_OPS_PER_INSTR = 2 * 64  # 64 u8*s8 multiply-adds per 512-bit vpdpbusd


@functools.cache
def vnni_peak_gops(target: Target, iters: int = 2_000_000) -> float:
    """Peak u8 x s8 -> s32 GOPS over all of the target's cores, measured now (about 0.1 s)."""
    require_vnni(target)
    cores = num_cores(target)
    best = best_seconds(vnni_kernel(cores, iters), target, np.array([0x01010101, 0x01010101], "int32"), (cores, 16))
    return cores * iters * PEAK_CHAINS * _OPS_PER_INSTR / best / 1e9


@functools.cache
def fma_peak_gops(target: Target, iters: int = 2_000_000) -> float:
    """Peak fp32 GOPS (2 per fused multiply-add lane) over all of the target's cores, measured now."""
    cores, lanes = num_cores(target), vector_bytes(target) // 4
    best = best_seconds(fma_kernel(cores, iters, lanes), target, FMA_COEF, (cores, lanes))
    return cores * iters * PEAK_CHAINS * lanes * 2 / best / 1e9
