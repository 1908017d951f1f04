"""The u8 x s8 -> s32 Intel AMX tile product (``tdpbusd``) as TensorIR intrinsics.

One intrinsic computes a 32 x 32 int32 block over a reduction of ``64 * depth`` (``depth`` 1..16):
``C[32, 32] += A[32, 64 * depth] x B``. Its implementation keeps the block in four accumulator
tiles for the whole reduction and streams two A and two B tiles per 64-step, so one call loads
and stores its block once: the register micro-kernel of the fast-kernel recipe, in tile registers.

B is read in VNNI's packed layout ``[n // 16, k // 4, n % 16, k % 4]``: a 16-row AMX B tile is 16
consecutive 4-deep groups of one 16-column panel, 64 bytes each. So a weight is packed for AMX
exactly as for VNNI, and the Tensorize rule prepares operands for both the same way. A is read in
place (row-major, any row stride), C is any row-major int32 block.

Executing tile instructions needs the OS's permission (Linux ``arch_prctl``), which
:func:`ms_heron.hardware.amx.request_amx_tile_state` asks for; the Tensorize rule offers these
intrinsics only where :func:`ms_heron.hardware.targets.has_amx` says it was granted.
"""

from __future__ import annotations

import functools

from tvm import tirx
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from ..hardware.amx import load_tile_config, tile_instruction

#: The block one call computes: two by two 16 x 16 int32 tiles.
ROWS = COLS = 32
#: Reduction per ``tdpbusd``: a 16-row A tile holds 64 bytes per row.
STEP = 64
#: Deepest reduction one call covers (in steps): 16 x 64 = 1024.
MAX_DEPTH = 16
#: The largest share of extra work padding a block to AMX's 32-row tiles may add; past it the
#: Tensorize rule leaves the block to VNNI alone. Half: a tile's peak is several times VNNI's on
#: the same core (about 8x on an Emerald Rapids Xeon), and ResNet-50's 7 x 7 convolutions (49 rows
#: padded to 64) need 0.31. The VNNI space is made either way and the search measures both, so a
#: tile space refused here loses at most a faster kernel.
MAX_PADDING_WASTE = 0.5

_PREFIX = "ms_heron_amx_u8s8s32_"

# What the implementation marks for :mod:`ms_heron.codegen.amx_tiles`, which finishes the kernel
# once the loops around each call are known. Built without that pass, the marks change nothing.
#: Block annotation of a tensorized call.
KERNEL = "ms_heron.amx_kernel"
#: Around the tile configuration each call loads (the pass loads it once per thread instead).
TILE_CONFIG = "ms_heron.amx_tile_config"
#: Around the four accumulator loads (the pass zeroes the tiles instead where the block was zeroed).
ACCUMULATOR_LOADS = "ms_heron.amx_accumulator_loads"
#: Around one operand's tile loads, with 0 for A and 1 for B (the pass gives the operand the loop
#: around the calls walks the streaming hint).
OPERAND_LOADS = "ms_heron.amx_operand_loads"
#: The tile load the implementation uses.
LOAD = "tileloadd64"


def intrinsic_name(depth: int) -> str:
    return f"{_PREFIX}{ROWS}x{COLS}x{STEP * depth}"


def is_amx(name: str) -> bool:
    return name.startswith(_PREFIX)


# Parsed once with the reduction ``kc`` symbolic; each depth's intrinsic is a specialization.
@T.prim_func(s_tir=True)
def _desc(a: T.handle, b: T.handle, c: T.handle) -> None:
    sa, sb, sc, kc = T.int32(), T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, (ROWS, kc), "uint8", strides=[sa, 1], offset_factor=1)
    B = T.match_buffer(
        b, (COLS // 16, kc // 4, 16, 4), "int8", strides=[sb, 64, 4, 1], offset_factor=1
    )
    C = T.match_buffer(c, (ROWS, COLS), "int32", strides=[sc, 1], offset_factor=1)
    with T.sblock("root"):
        T.reads(C[0:ROWS, 0:COLS], A[0:ROWS, 0:kc], B[0 : COLS // 16, 0 : kc // 4, 0:16, 0:4])
        T.writes(C[0:ROWS, 0:COLS])
        for i, j, k in T.grid(ROWS, COLS, kc):
            with T.sblock("update"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "int32") * T.cast(
                    B[vj // 16, vk // 4, vj % 16, vk % 4], "int32"
                )


@T.prim_func(s_tir=True)
def _impl(a: T.handle, b: T.handle, c: T.handle) -> None:
    sa, sb, sc, kc = T.int32(), T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, (ROWS, kc), "uint8", strides=[sa, 1], offset_factor=1)
    B = T.match_buffer(
        b, (COLS // 16, kc // 4, 16, 4), "int8", strides=[sb, 64, 4, 1], offset_factor=1
    )
    C = T.match_buffer(c, (ROWS, COLS), "int32", strides=[sc, 1], offset_factor=1)
    with T.sblock("root"):
        T.reads(C[0:ROWS, 0:COLS], A[0:ROWS, 0:kc], B[0 : COLS // 16, 0 : kc // 4, 0:16, 0:4])
        T.writes(C[0:ROWS, 0:COLS])
        T.sblock_attr({KERNEL: 1})
        with T.attr(0, TILE_CONFIG, 1):
            load_tile_config()
        c_stride = T.Cast("int64", sc * 4)
        with T.attr(0, ACCUMULATOR_LOADS, 1):
            T.evaluate(tile_instruction(LOAD, T.uint8(0), T.address_of(C[0, 0]), c_stride))
            T.evaluate(tile_instruction(LOAD, T.uint8(1), T.address_of(C[0, 16]), c_stride))
            T.evaluate(tile_instruction(LOAD, T.uint8(2), T.address_of(C[16, 0]), c_stride))
            T.evaluate(tile_instruction(LOAD, T.uint8(3), T.address_of(C[16, 16]), c_stride))
        for step in range(kc // STEP):
            with T.attr(0, OPERAND_LOADS, 0):
                T.evaluate(
                    tile_instruction(
                        LOAD, T.uint8(4), T.address_of(A[0, step * STEP]), T.Cast("int64", sa)
                    )
                )
                T.evaluate(
                    tile_instruction(
                        LOAD, T.uint8(5), T.address_of(A[16, step * STEP]), T.Cast("int64", sa)
                    )
                )
            with T.attr(0, OPERAND_LOADS, 1):
                T.evaluate(
                    tile_instruction(
                        LOAD, T.uint8(6), T.address_of(B[0, step * 16, 0, 0]), T.int64(64)
                    )
                )
                T.evaluate(
                    tile_instruction(
                        LOAD, T.uint8(7), T.address_of(B[1, step * 16, 0, 0]), T.int64(64)
                    )
                )
            T.evaluate(tile_instruction("tdpbusd", T.uint8(0), T.uint8(4), T.uint8(6)))
            T.evaluate(tile_instruction("tdpbusd", T.uint8(1), T.uint8(4), T.uint8(7)))
            T.evaluate(tile_instruction("tdpbusd", T.uint8(2), T.uint8(5), T.uint8(6)))
            T.evaluate(tile_instruction("tdpbusd", T.uint8(3), T.uint8(5), T.uint8(7)))
        T.evaluate(tile_instruction("tilestored64", T.uint8(0), T.address_of(C[0, 0]), c_stride))
        T.evaluate(tile_instruction("tilestored64", T.uint8(1), T.address_of(C[0, 16]), c_stride))
        T.evaluate(tile_instruction("tilestored64", T.uint8(2), T.address_of(C[16, 0]), c_stride))
        T.evaluate(tile_instruction("tilestored64", T.uint8(3), T.address_of(C[16, 16]), c_stride))


def _of_depth(func, depth: int):
    a = func.params[0]
    return func.specialize(
        {a: tirx.decl_buffer((ROWS, STEP * depth), "uint8", strides=a.strides, offset_factor=1)}
    )


@functools.cache
def register_amx(depth: int) -> str:
    """Register the intrinsic of reduction ``64 * depth``; returns its name (cached per process)."""
    name = intrinsic_name(depth)
    if TensorIntrin.get(name, allow_missing=True) is None:
        TensorIntrin.register(name, _of_depth(_desc, depth), _of_depth(_impl, depth))
    return name


def register_all_amx() -> list[str]:
    """Every depth's intrinsic, deepest first: the order the Tensorize rule tries them in."""
    return [register_amx(depth) for depth in range(MAX_DEPTH, 0, -1)]
