"""Micro-benchmarks of the host CPU: what its vector units do per cycle, measured, not assumed.

The kernels are TVM-built loops of independent accumulator chains (an x86 dot product, AMX tile
products or vector FMAs) with loop-invariant operands read from memory, so the loop holds nothing
else and nothing folds.
:mod:`.peak` measures with them: the peaks for "% of peak" figures and bounds, and how many
independent accumulators a micro-kernel needs to keep the FMA units busy.
"""

from __future__ import annotations

import math
import time

import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.target import Target

from .amx import load_tile_config, tile_instruction
from .dot_products import DotProduct

#: Accumulator chains per core in the peak kernels: more than any core here needs (8 on Zen 4/5
#: and Sapphire/Emerald Rapids: a 4-cycle FMA on 2 ports).
PEAK_CHAINS = 12


#: A probe runs in this many bursts of five runs, :data:`BURST_GAP_S` apart, and the fastest run
#: counts. On a shared host the vCPUs run at half speed for stretches longer than one burst: one
#: burst of five gave a 2-core Xeon's FMA peak as 229-319 GFLOPS and its AMX peak as 4.8-10.1 TOPS
#: in successive processes, and a peak taken low halves every task's bound, so the budget split
#: held tasks at twice their speed to be "at their bound" and gave them no further rounds.
BURSTS = 8
BURST_GAP_S = 0.1


def best_seconds(
    kernel: tvm.tirx.PrimFunc,
    target: Target,
    coef: np.ndarray,
    out_shape: tuple,
    *,
    bursts: int = BURSTS,
) -> float:
    """Fastest run of a probe kernel ``(coef, out)`` over ``bursts`` bursts of five, spread in time;
    ``out`` has ``coef``'s dtype."""
    lib = tvm.compile(kernel, target=target)
    out = tvm.runtime.tensor(np.zeros(out_shape, coef.dtype))
    timer = lib.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=5)
    coef = tvm.runtime.tensor(coef)  # once: the memory probe's is twice the largest cache
    fastest = math.inf
    for burst in range(bursts):
        if burst:
            time.sleep(BURST_GAP_S)
        fastest = min(fastest, timer(coef, out).min)
    return fastest


def dot_kernel(
    dot: DotProduct, cores: int, iters: int, chains: int = PEAK_CHAINS
) -> tvm.tirx.PrimFunc:
    """``chains`` independent accumulators of the x86 dot product ``dot`` per core, ``iters`` times:
    the instruction and, where it does not accumulate itself, its ``vpaddd``. Each step multiplies
    its own accumulator's bytes: a product of loop-invariant operands alone (``vpmaddwd``'s, unlike
    ``vpdpbusd``'s, which takes the accumulator) would be hoisted out of the loop, leaving only
    adds."""
    lanes = dot.lanes

    @T.prim_func(s_tir=True)
    def probe(coef: T.Buffer((2,), "int32"), out: T.Buffer((cores, lanes), "int32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for c in T.parallel(cores):
            with T.sblock("core"):
                vc = T.axis.spatial(cores, c)
                acc = T.sblock_alloc_buffer((chains * lanes,), "int32", scope="local")
                for a in T.unroll(chains):
                    acc[T.ramp(a * lanes, 1, lanes)] = T.broadcast(a, lanes)
                for _t in range(iters):
                    for a in T.unroll(chains):
                        acc[T.ramp(a * lanes, 1, lanes)] = dot.step(
                            acc[T.ramp(a * lanes, 1, lanes)],
                            T.reinterpret(acc[T.ramp(a * lanes, 1, lanes)], dtype=dot.operand_type),
                            dot.broadcast(coef[1]),
                        )
                out[vc, T.ramp(0, 1, lanes)] = acc[T.ramp(0, 1, lanes)]

    return probe


def amx_kernel(cores: int, iters: int) -> tvm.tirx.PrimFunc:
    """Four independent AMX ``tdpbusd`` accumulator tiles per core (16 x 16 int32 each, fed by two
    A and two B tiles, all zeroed by ``ldtilecfg``), ``iters`` times; ``out[core]`` receives the
    first accumulator."""

    @T.prim_func(s_tir=True)
    def probe(coef: T.Buffer((2,), "int32"), out: T.Buffer((cores, 256), "int32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for c in T.parallel(cores):
            with T.sblock("core"):
                vc = T.axis.spatial(cores, c)
                T.reads()
                T.writes(out[vc, 0:256])
                load_tile_config()
                for _t in range(iters):
                    T.evaluate(tile_instruction("tdpbusd", T.uint8(0), T.uint8(4), T.uint8(6)))
                    T.evaluate(tile_instruction("tdpbusd", T.uint8(1), T.uint8(4), T.uint8(7)))
                    T.evaluate(tile_instruction("tdpbusd", T.uint8(2), T.uint8(5), T.uint8(6)))
                    T.evaluate(tile_instruction("tdpbusd", T.uint8(3), T.uint8(5), T.uint8(7)))
                T.evaluate(
                    tile_instruction(
                        "tilestored64", T.uint8(0), T.address_of(out[vc, 0]), T.int64(64)
                    )
                )

    return probe


def fma_kernel(cores: int, iters: int, lanes: int, chains: int = PEAK_CHAINS) -> tvm.tirx.PrimFunc:
    """``chains`` independent ``lanes``-wide fp32 FMA accumulators per core, ``iters`` times."""
    fma = f"llvm.fma.v{lanes}f32"

    @T.prim_func(s_tir=True)
    def probe(coef: T.Buffer((2,), "float32"), out: T.Buffer((cores, lanes), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for c in T.parallel(cores):
            with T.sblock("core"):
                vc = T.axis.spatial(cores, c)
                acc = T.sblock_alloc_buffer((chains * lanes,), "float32", scope="local")
                for a in T.unroll(chains):
                    acc[T.ramp(a * lanes, 1, lanes)] = T.broadcast(T.float32(a), lanes)
                for _t in range(iters):
                    for a in T.unroll(chains):
                        acc[T.ramp(a * lanes, 1, lanes)] = T.call_llvm_pure_intrin(
                            T.llvm_lookup_intrinsic_id(fma),
                            acc[T.ramp(a * lanes, 1, lanes)],
                            T.broadcast(coef[0], lanes),
                            T.broadcast(coef[1], lanes),
                            dtype=f"float32x{lanes}",
                        )
                out[vc, T.ramp(0, 1, lanes)] = acc[T.ramp(0, 1, lanes)]

    return probe


FMA_COEF = np.array([0.999999, 1e-7], "float32")  # keeps the accumulators finite and normal


def read_kernel(cores: int, per_core: int, lanes: int, chains: int = 4) -> tvm.tirx.PrimFunc:
    """Every core sums its own ``per_core`` floats of ``a`` into ``chains`` independent vector
    accumulators: a stream of loads and nothing else, so its time is the memory's."""
    steps = per_core // (chains * lanes)

    @T.prim_func(s_tir=True)
    def probe(
        a: T.Buffer((cores * per_core,), "float32"), out: T.Buffer((cores, lanes), "float32")
    ):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for c in T.parallel(cores):
            with T.sblock("core"):
                vc = T.axis.spatial(cores, c)
                acc = T.sblock_alloc_buffer((chains * lanes,), "float32", scope="local")
                for k in T.unroll(chains):
                    acc[T.ramp(k * lanes, 1, lanes)] = T.broadcast(T.float32(0), lanes)
                for i in range(steps):
                    for k in T.unroll(chains):
                        acc[T.ramp(k * lanes, 1, lanes)] = (
                            acc[T.ramp(k * lanes, 1, lanes)]
                            + a[T.ramp(vc * per_core + (i * chains + k) * lanes, 1, lanes)]
                        )
                for k in T.unroll(1, chains):
                    acc[T.ramp(0, 1, lanes)] = (
                        acc[T.ramp(0, 1, lanes)] + acc[T.ramp(k * lanes, 1, lanes)]
                    )
                out[vc, T.ramp(0, 1, lanes)] = acc[T.ramp(0, 1, lanes)]

    return probe
