"""Tensor intrinsics: which one serves which (target, dtype), and registration of fixed ones.

Importing this package is cheap. :func:`ensure_registered` pays for TVM's
``tvm.s_tir.tensor_intrin`` (:mod:`.library`: its x86 part alone for a CPU target, ~0.1 s) once per
process, where tuning or tensorizing needs it.
"""

import functools

from tvm.target import Target

from ..hardware.targets import is_cuda
from .library import fast_parsing, import_x86_intrinsics

with fast_parsing():  # their modules define TVMScript intrinsics: parsed on import
    from .amx import MAX_PADDING_WASTE as AMX_MAX_PADDING_WASTE
    from .amx import is_amx, register_all_amx
    from .x86_dot import MAX_PADDING_WASTE as DOT_MAX_PADDING_WASTE
    from .x86_dot import TVM_VNNI_INTRIN, override_tvm_vnni, register_dot_products
from .wmma import DTYPES as WMMA_DTYPES
from .wmma import WmmaGroup, wmma_groups

__all__ = [
    "AMX_MAX_PADDING_WASTE",
    "is_amx",
    "register_all_amx",
    "TVM_VNNI_INTRIN",
    "DOT_MAX_PADDING_WASTE",
    "WmmaGroup",
    "wmma_groups",
    "ensure_registered",
    "import_x86_intrinsics",
    "register_dot_products",
]


def ensure_registered(target: Target | None = None) -> None:
    """Register ms_heron's intrinsics and repair TVM's VNNI one, once per process, so that replaying
    a database record finds every intrinsic it names: AMX, the x86 dot products and TVM's x86 ones
    always; WMMA in Heron's three shapes and the rest of TVM's library for a CUDA target or when no
    target is given (TVMScript that takes ~5 s to parse, which a CPU tuning process would pay for
    nothing)."""
    _register_cpu()
    if target is None or is_cuda(target):
        _register_wmma()


@functools.cache
def _register_cpu() -> None:
    import_x86_intrinsics()
    register_dot_products()
    register_all_amx()
    override_tvm_vnni()


@functools.cache
def _register_wmma() -> None:
    for in_dtype, out_dtype in WMMA_DTYPES:
        wmma_groups(in_dtype, out_dtype)
