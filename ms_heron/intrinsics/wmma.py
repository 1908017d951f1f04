"""CUDA WMMA (TensorCore) intrinsic groups in Heron's three fragment shapes.

Heron's TensorCore path chooses the fragment shape ``m x n x k`` among 16x16x16, 32x8x16 and
8x32x16 (``m * n * k = 4096``, ``k = 16``). TVM 0.27 registers only 16x16x16; the other two are
built here from TVM's own generators (``tvm.s_tir.tensor_intrin.cuda.get_wmma_*_intrin``), so all
three share one implementation path in codegen and nvcc.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.s_tir import TensorIntrin

from .library import import_tvm_intrinsics

#: Heron's fragment shapes (m, n, k).
SHAPES = ((16, 16, 16), (32, 8, 16), (8, 32, 16))

#: (input dtype, accumulator dtype) pairs WMMA computes, with their short names in intrinsic names.
DTYPES = {
    ("float16", "float32"): ("f16", "f32"),
    ("float16", "float16"): ("f16", "f16"),
    ("int8", "int32"): ("s8", "s32"),
}

#: Scope of the shared-memory stages the intrinsics load from and store to (dynamic shared memory,
#: as MetaSchedule's TensorCore rule uses).
SHARED_SCOPE = "shared.dyn"


@dataclass(frozen=True)
class WmmaGroup:
    """One fragment shape for one dtype pair: the five intrinsics a TensorCore matmul needs."""

    shape: tuple[int, int, int]
    in_dtype: str
    out_dtype: str

    @property
    def tag(self) -> str:
        a, c = DTYPES[(self.in_dtype, self.out_dtype)]
        m, n, k = self.shape
        return f"{m}x{n}x{k}_{a}{a}{c}"

    def names(self) -> dict[str, str]:
        """The group as MetaSchedule's ``MultiLevelTilingTensorCore`` takes it."""
        a, c = DTYPES[(self.in_dtype, self.out_dtype)]
        shape = "x".join(map(str, self.shape))
        return {
            "init": f"ms_heron_wmma_fill_{shape}_{c}",
            "load_a": f"ms_heron_wmma_load_{shape}_{a}_a_shared_dyn",
            "load_b": f"ms_heron_wmma_load_{shape}_{a}_b_shared_dyn",
            "compute": f"ms_heron_wmma_sync_{self.tag}",
            "store": f"ms_heron_wmma_store_{shape}_{c}_shared_dyn",
        }

    def register(self) -> None:
        """Register the five intrinsics (idempotent)."""
        import_tvm_intrinsics()
        from tvm.s_tir.tensor_intrin import cuda  # pylint: disable=import-outside-toplevel

        m, n, k = self.shape
        names = self.names()
        makers = {
            "init": lambda: cuda.get_wmma_fill_intrin(m, n, k, self.out_dtype),
            "load_a": lambda: cuda.get_wmma_load_intrin(
                m, n, k, self.in_dtype, SHARED_SCOPE, False, False
            ),
            "load_b": lambda: cuda.get_wmma_load_intrin(
                m, n, k, self.in_dtype, SHARED_SCOPE, True, False
            ),
            "compute": lambda: cuda.get_wmma_sync_intrin(
                m, n, k, self.in_dtype, self.out_dtype, False
            ),
            "store": lambda: cuda.get_wmma_store_intrin(m, n, k, self.out_dtype, SHARED_SCOPE),
        }
        for role, name in names.items():
            if TensorIntrin.get(name, allow_missing=True) is None:
                TensorIntrin.register(name, *makers[role]())


def wmma_groups(in_dtype: str, out_dtype: str, shapes=SHAPES) -> list[WmmaGroup]:
    """The registered groups for a dtype pair, one per shape; empty when WMMA has no such pair."""
    if (in_dtype, out_dtype) not in DTYPES:
        return []
    groups = [WmmaGroup(tuple(s), in_dtype, out_dtype) for s in shapes]
    for group in groups:
        group.register()
    return groups
