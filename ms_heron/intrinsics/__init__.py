"""Tensor intrinsics: which one serves which (target, dtype), and registration of fixed ones.

Importing this package is cheap. :func:`ensure_registered` pays TVM's ``tvm.s_tir.tensor_intrin``
import (:mod:`.library` makes it ~2 s instead of ~15 s) once per process, where tuning or
tensorizing needs it.
"""

import functools

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


@functools.cache
def ensure_registered() -> None:
    """Register ms_heron's intrinsics (AMX, VNNI, WMMA in Heron's three shapes) and repair TVM's
    VNNI one; runs once per process, so replaying a database record finds every intrinsic it names."""
    import_tvm_intrinsics()
    register_vnni()
    register_all_amx()
    override_tvm_vnni()
    for in_dtype, out_dtype in WMMA_DTYPES:
        wmma_groups(in_dtype, out_dtype)
