"""Measured peak throughput of the machine (int8 VNNI and fp32 FMA), for "% of peak" figures.

The numbers come from TVM-built kernels (12 independent accumulator chains of ``vpdpbusd`` or of
vector FMAs per core, the loop of ``shared/tools/peak.c``, with loop-invariant operands read from
memory so that the loop holds nothing else), so they need no C compiler, follow the Target's
vector width and reflect the clock the machine runs at right now.
"""

from __future__ import annotations

import functools

import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.target import Target

from ..targets import num_cores, require_vnni, vector_bytes

_CHAINS = 12  # enough independent accumulators to cover vpdpbusd's latency on 2 ports
_OPS_PER_INSTR = 2 * 64  # 64 u8*s8 multiply-adds per 512-bit vpdpbusd


def _best_seconds(kernel: tvm.tirx.PrimFunc, target: Target, coef: np.ndarray, out_shape: tuple) -> float:
    """Fastest of five runs of a peak kernel ``(coef, out)``; ``out`` has ``coef``'s dtype."""
    lib = tvm.compile(kernel, target=target)
    out = tvm.runtime.tensor(np.zeros(out_shape, coef.dtype))
    return lib.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=5)(tvm.runtime.tensor(coef), out).min


def _vnni_peak_kernel(cores: int, iters: int) -> tvm.tirx.PrimFunc:
    @T.prim_func(s_tir=True)
    def peak(coef: T.Buffer((2,), "int32"), out: T.Buffer((cores, 16), "int32")):
        # Operands from memory: loop-invariant, unknown to the compiler (see the FMA kernel below).
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for c in T.parallel(cores):
            with T.sblock("core"):
                vc = T.axis.spatial(cores, c)
                acc = T.sblock_alloc_buffer((_CHAINS * 16,), "int32", scope="local")
                for a in T.unroll(_CHAINS):
                    acc[T.ramp(a * 16, 1, 16)] = T.broadcast(a, 16)
                for _t in range(iters):
                    for a in T.unroll(_CHAINS):
                        acc[T.ramp(a * 16, 1, 16)] = T.call_llvm_pure_intrin(
                            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                            acc[T.ramp(a * 16, 1, 16)],
                            T.reinterpret(T.broadcast(coef[0], 16), dtype="int8x64"),
                            T.reinterpret(T.broadcast(coef[1], 16), dtype="int8x64"),
                            dtype="int32x16",
                        )
                out[vc, T.ramp(0, 1, 16)] = acc[T.ramp(0, 1, 16)]

    return peak


@functools.cache
def vnni_peak_gops(target: Target, iters: int = 2_000_000) -> float:
    """Peak u8 x s8 -> s32 GOPS over all of the target's cores, measured now (about 0.1 s)."""
    require_vnni(target)
    cores = num_cores(target)
    best = _best_seconds(_vnni_peak_kernel(cores, iters), target, np.array([0x01010101, 0x01010101], "int32"), (cores, 16))
    return cores * iters * _CHAINS * _OPS_PER_INSTR / best / 1e9


def _fma_peak_kernel(cores: int, iters: int, lanes: int) -> tvm.tirx.PrimFunc:
    fma = f"llvm.fma.v{lanes}f32"

    @T.prim_func(s_tir=True)
    def peak(coef: T.Buffer((2,), "float32"), out: T.Buffer((cores, lanes), "float32")):
        # The multiplier and addend come from memory: loop-invariant, yet unknown to the compiler, so
        # the loop body is the FMAs alone and nothing folds.
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for c in T.parallel(cores):
            with T.sblock("core"):
                vc = T.axis.spatial(cores, c)
                acc = T.sblock_alloc_buffer((_CHAINS * lanes,), "float32", scope="local")
                for a in T.unroll(_CHAINS):
                    acc[T.ramp(a * lanes, 1, lanes)] = T.broadcast(T.float32(a), lanes)
                for _t in range(iters):
                    for a in T.unroll(_CHAINS):
                        acc[T.ramp(a * lanes, 1, lanes)] = T.call_llvm_pure_intrin(
                            T.llvm_lookup_intrinsic_id(fma),
                            acc[T.ramp(a * lanes, 1, lanes)],
                            T.broadcast(coef[0], lanes),
                            T.broadcast(coef[1], lanes),
                            dtype=f"float32x{lanes}",
                        )
                out[vc, T.ramp(0, 1, lanes)] = acc[T.ramp(0, 1, lanes)]

    return peak


@functools.cache
def fma_peak_gops(target: Target, iters: int = 2_000_000) -> float:
    """Peak fp32 GOPS (2 per fused multiply-add lane) over all of the target's cores, measured now."""
    cores, lanes = num_cores(target), vector_bytes(target) // 4
    best = _best_seconds(_fma_peak_kernel(cores, iters, lanes), target, np.array([0.999999, 1e-7], "float32"), (cores, lanes))
    return cores * iters * _CHAINS * lanes * 2 / best / 1e9
