"""The MetaSchedule LocalBuilder ms_heron tunes with, for CPU and CUDA targets.

* LocalBuilder's default ``f_build`` imports ``tvm.s_tir.tensor_intrin`` (~15 s) in a fresh worker
  pool on every ``build()`` call. Tensorized candidates do not need it at build time (the intrinsic
  bodies are inlined when the schedule is replayed), so the import is skipped here.
* On CUDA, ``tvm.compile`` only emits source; the GPU driver would compile it when the module is
  loaded on the GPU host, so a broken kernel would surface only there. Candidates are compiled with
  ``nvcc`` for the Target's arch right away, and built with ``tirx.disable_storage_rewrite``
  (storage rewrite merges WMMA fragment buffers and breaks most TensorCore candidates).
"""

from __future__ import annotations

import shutil

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ..hardware.targets import TargetError, is_cuda

#: PassContext for CUDA builds; see the module docstring.
CUDA_BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}


def build_candidate(mod, target, _params):
    """``f_build`` for :class:`LocalBuilder`: MetaSchedule's default build minus the registry
    import; on CUDA, the ahead-of-time nvcc check of :func:`compile_cuda`."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    if not is_cuda(target):
        return tvm.compile(mod, target=target).mod  # LocalBuilder exports the runtime module
    lib = build_cuda(mod, target)
    compile_cuda(lib, target)
    return lib.mod


def build_cuda(mod, target: Target):
    """``tvm.compile`` for a CUDA target, with the storage-rewrite fix for TensorCore kernels."""
    with tvm.transform.PassContext(config=CUDA_BUILD_CONFIG):
        return tvm.compile(mod, target=target)


def cuda_source(lib) -> str:
    """The generated CUDA C++ of a module built for a CUDA target."""
    return lib.mod.imports[0].inspect_source("cuda")


def require_nvcc() -> str:
    path = shutil.which("nvcc")
    if path is None:
        raise TargetError(
            "CUDA candidates are compiled with nvcc before they count as built, but nvcc is not on "
            "PATH; install the CUDA toolkit (or add its bin/ directory to PATH)"
        )
    return path


def compile_cuda(lib, target: Target) -> bytes:
    """nvcc-compile ``lib``'s CUDA source for ``target``'s arch into a fatbin; raises on any error."""
    from tvm.support import nvcc  # pylint: disable=import-outside-toplevel

    require_nvcc()
    with target:  # compile_cuda reads the arch from the current Target
        return nvcc.compile_cuda(cuda_source(lib), target_format="fatbin", compiler="nvcc")


def local_builder(max_workers: int | None = None, timeout_sec: float = 30.0) -> ms.builder.LocalBuilder:
    """The builder ms_heron tunes with (any target)."""
    return ms.builder.LocalBuilder(max_workers=max_workers, timeout_sec=timeout_sec, f_build=build_candidate)
