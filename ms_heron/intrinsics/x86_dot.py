"""The x86 dot products (:mod:`ms_heron.hardware.dot_products`) as TensorIR intrinsics.

Each computes ``C[lanes] += A[reduction] . B[lanes, reduction]``: one u8 activation group broadcast
against ``lanes`` rows of s8 weights, read in the packed layout ``[n // lanes, k // reduction,
n % lanes, k % reduction]`` (:mod:`ms_heron.schedule.operand_layout` packs a weight to it). Where
the instruction multiplies s16 (``vpmaddwd``), both operands are read widened: an s16 weight, and
the s16 copy of the u8 activation that :func:`~ms_heron.schedule.operand_layout.widen_activation`
makes.

TVM 0.27 ships AVX-512 VNNI's as ``dot_16x4_vnni``, but its implementation passes ``<16 x i32>``
operands to ``llvm.x86.avx512.vpdpbusd.512``; the bundled LLVM 22 wants ``<64 x i8>`` and rejects
the module, so every candidate of TVM's own rules fails to build. :func:`override_tvm_vnni` points
that name at the implementation here. TVM has no intrinsic for the other three.
"""

from __future__ import annotations

import functools

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from ..hardware.dot_products import DOT_PRODUCTS, S16_DOT_PRODUCTS, VNNI, DotProduct
from .library import fast_parsing, import_x86_intrinsics

#: The name TVM's own x86 rules look up (``tvm.s_tir.tensor_intrin.x86.VNNI_DOT_16x4_INTRIN``).
TVM_VNNI_INTRIN = "dot_16x4_vnni"

#: The largest share of extra work padding a block to a dot product's tiles may add: one instruction
#: does two or four multiply-adds per lane, so even twice the work beats the scalar kernel.
MAX_PADDING_WASTE = 1.0


@functools.cache
def _desc_and_impl(dot: DotProduct):
    with fast_parsing():
        return _parsed(dot)


def _parsed(dot: DotProduct):
    lanes, red = dot.tile
    a_dtype, w_dtype = dot.activation_dtype, dot.weight_dtype

    def activation(value):
        # a widened activation holds u8 values: the schedule's widening copy reads them back as u8
        return T.cast(T.cast(value, "uint8") if dot.widens_activation else value, "int32")

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((red,), a_dtype, offset_factor=1),
        B: T.Buffer((lanes, red), w_dtype, offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:red], B[0:lanes, 0:red])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, red):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + activation(A[vk]) * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(
        A: T.Buffer((red,), a_dtype, offset_factor=1),
        B: T.Buffer((lanes, red), w_dtype, offset_factor=1),
        C: T.Buffer((lanes,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:red], B[0:lanes, 0:red])
            T.writes(C[0:lanes])
            C[T.ramp(T.int32(0), 1, lanes)] = dot.step(
                C.vload([0], dtype=f"int32x{lanes}"),
                dot.broadcast(T.reinterpret(A.vload([0], dtype=f"{a_dtype}x{red}"), dtype="int32")),
                B.vload([0, 0], dtype=dot.operand_type),
            )

    return desc, impl


def register_dot_products() -> None:
    """Register every dot product's intrinsic under its name (cheap; safe to call more than
    once)."""
    for dot in (*DOT_PRODUCTS, *S16_DOT_PRODUCTS):
        if TensorIntrin.get(dot.name, allow_missing=True) is None:
            TensorIntrin.register(dot.name, *_desc_and_impl(dot))


def override_tvm_vnni() -> None:
    """Point TVM's own ``dot_16x4_vnni`` at the fixed implementation, so stock rules build.

    TVM registers its broken version when ``tvm.s_tir.tensor_intrin.x86`` is imported (every
    ``TuneContext`` imports the library), so the override must come after that import.
    """
    import_x86_intrinsics()
    TensorIntrin.register(TVM_VNNI_INTRIN, *_desc_and_impl(VNNI), override=True)
