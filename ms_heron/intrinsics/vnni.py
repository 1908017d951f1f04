"""The u8 x s8 -> s32 AVX-512 VNNI dot product (16 lanes x 4 reductions) as a TensorIR intrinsic.

TVM 0.27 ships this intrinsic as ``dot_16x4_vnni``, but its implementation passes ``<16 x i32>``
operands to ``llvm.x86.avx512.vpdpbusd.512``; the bundled LLVM 22 wants ``<64 x i8>`` and rejects the
module, so every VNNI candidate fails to build. The description here is TVM's (the same computation);
the implementation reinterprets the operands as ``int8x64``.
"""

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from .library import import_x86_intrinsics

#: The name ms_heron's rules tensorize with; always registered with the fixed implementation.
VNNI_INTRIN = "ms_heron_dot_16x4_vnni"

#: The name TVM's own x86 rules look up (``tvm.s_tir.tensor_intrin.x86.VNNI_DOT_16x4_INTRIN``).
TVM_VNNI_INTRIN = "dot_16x4_vnni"

LANES = 16
REDUCTION = 4
#: The largest share of extra work padding a block to VNNI's tiles may add: one instruction does
#: four multiply-adds per lane, so even twice the work beats the scalar kernel.
MAX_PADDING_WASTE = 1.0


@T.prim_func(s_tir=True)
def _vnni_desc(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        for i in T.serial(0, 16):
            for k in T.serial(0, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")


@T.prim_func(s_tir=True)
def _vnni_impl(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a_i32 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"),
            T.reinterpret(T.broadcast(a_i32, 16), dtype="int8x64"),
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16",
        )


def register_vnni() -> None:
    """Register :data:`VNNI_INTRIN` (cheap; safe to call more than once)."""
    if TensorIntrin.get(VNNI_INTRIN, allow_missing=True) is None:
        TensorIntrin.register(VNNI_INTRIN, _vnni_desc, _vnni_impl)


def override_tvm_vnni() -> None:
    """Point TVM's own ``dot_16x4_vnni`` at the fixed implementation, so stock rules build.

    TVM registers its broken version when ``tvm.s_tir.tensor_intrin.x86`` is imported (every
    ``TuneContext`` imports the library), so the override must come after that import.
    """
    import_x86_intrinsics()
    TensorIntrin.register(TVM_VNNI_INTRIN, _vnni_desc, _vnni_impl, override=True)
