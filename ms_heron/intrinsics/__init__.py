"""Tensor intrinsics: which one serves which (target, dtype), and registration of fixed ones.

Importing this package is cheap. :func:`ensure_registered` pays TVM's ``tvm.s_tir.tensor_intrin``
import (:mod:`.library` makes it ~2 s instead of ~15 s) once per process, where tuning or
tensorizing needs it.
"""

import functools

from tvm.target import Target

from ..hardware.targets import is_cuda
from .amx import MAX_PADDING_WASTE as AMX_MAX_PADDING_WASTE
from .amx import is_amx, register_all_amx
from .library import import_tvm_intrinsics
from .vnni import LANES as VNNI_LANES
from .vnni import MAX_PADDING_WASTE as VNNI_MAX_PADDING_WASTE
from .vnni import REDUCTION as VNNI_REDUCTION
from .vnni import TVM_VNNI_INTRIN, VNNI_INTRIN, override_tvm_vnni, register_vnni
from .wmma import DTYPES as WMMA_DTYPES
from .wmma import WmmaGroup, wmma_groups

__all__ = [
    "AMX_MAX_PADDING_WASTE",
    "is_amx",
    "register_all_amx",
    "VNNI_INTRIN",
    "TVM_VNNI_INTRIN",
    "VNNI_LANES",
    "VNNI_REDUCTION",
    "VNNI_MAX_PADDING_WASTE",
    "WmmaGroup",
    "wmma_groups",
    "ensure_registered",
    "register_vnni",
]


def ensure_registered(target: Target | None = None) -> None:
    """Register ms_heron's intrinsics and repair TVM's VNNI one, once per process, so that replaying
    a database record finds every intrinsic it names: AMX and VNNI always, WMMA in Heron's three
    shapes for a CUDA target or when no target is given (its 45 intrinsics are TVMScript that takes
    ~4 s to parse, which a CPU tuning process would pay for nothing)."""
    _register_cpu()
    if target is None or is_cuda(target):
        _register_wmma()


@functools.cache
def _register_cpu() -> None:
    import_tvm_intrinsics()
    register_vnni()
    register_all_amx()
    override_tvm_vnni()


@functools.cache
def _register_wmma() -> None:
    for in_dtype, out_dtype in WMMA_DTYPES:
        wmma_groups(in_dtype, out_dtype)
