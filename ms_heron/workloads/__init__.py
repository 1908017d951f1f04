"""What one tunes when it is not a model: a :class:`Workload` (a PrimFunc with inputs and a reference),
its check and timing (:mod:`.evaluate`), and Heron's operator suite (:mod:`.suite`), named cases and
families such as ``case("gemm.G1", "int8")`` or ``make("c2d", "fp32", N=1, ...)``."""

from .suite import (
                    CASES,
                    DTYPES,
                    FAMILIES,
                    FP32_ONLY,
                    bmm,
                    c1d,
                    c2d,
                    c3d,
                    case,
                    dil,
                    gemm,
                    gemv,
                    layernorm,
                    make,
                    pack_vnni,
                    scan,
                    softmax,
                    t2d,
                    vnni_padding,
)
from .workload import KERNEL, Workload, WorkloadError, from_func, load_kernel, random_array

__all__ = [
    "CASES", "DTYPES", "FAMILIES", "FP32_ONLY", "KERNEL", "Workload", "WorkloadError", "bmm", "c1d", "c2d", "c3d",
    "case", "dil", "from_func", "gemm", "gemv", "layernorm", "load_kernel", "make", "pack_vnni", "random_array",
    "scan", "softmax", "t2d", "vnni_padding",
]
