"""The builder ms_heron tunes with, for CPU and CUDA targets: MetaSchedule's LocalBuilder, changed
twice.

* LocalBuilder starts a fresh worker pool on every ``build()`` call (TVM's guard against a memory
  leak in long-lived workers), and each worker imports TVM and the build function's package (~2 s)
  before its first build: 3 s of every 5.6 s round of 16 ResNet-50 candidates on 2 cores, a third of
  a model's tuning time. :class:`PooledBuilder` keeps its workers across rounds and recycles each
  after :data:`BUILDS_PER_WORKER` builds instead, which bounds the leak as well.
* Its default ``f_build`` imports ``tvm.s_tir.tensor_intrin`` (~15 s) in every worker. Tensorized
  candidates do not need it at build time (the intrinsic bodies are inlined when the schedule is
  replayed), so the import is skipped here.
* On CUDA, ``tvm.compile`` only emits source; the GPU driver would compile it when the module is
  loaded on the GPU host, so a broken kernel would surface only there. Candidates are compiled with
  ``nvcc`` for the Target's arch right away, and built with ``tirx.disable_storage_rewrite``
  (storage rewrite merges WMMA fragment buffers and breaks most TensorCore candidates).
"""

from __future__ import annotations

import os
import shutil

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import default_export
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind
from tvm.target import Target

from ..codegen import tir_pipeline
from ..hardware.targets import TargetError, is_cuda
from .budget import DEFAULT_TIMEOUT_S, budget_timeout

#: PassContext for CUDA builds; see the module docstring.
CUDA_BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}

#: Builds a worker process serves before it is replaced (against memory growth in long-lived
#: workers).
BUILDS_PER_WORKER = 256


def build_candidate(mod, target, _params):
    """One candidate's build (also an ``f_build`` for TVM's LocalBuilder): MetaSchedule's default
    build minus the registry import; on CUDA, the ahead-of-time nvcc check of
    :func:`compile_cuda`."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    if not is_cuda(target):
        # LocalBuilder exports the runtime module
        return tvm.compile(mod, target=target, tir_pipeline=tir_pipeline(target)).mod
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
    """nvcc-compile ``lib``'s CUDA source for ``target``'s arch into a fatbin; raises on any
    error."""
    from tvm.support import nvcc  # pylint: disable=import-outside-toplevel

    require_nvcc()
    with target:  # compile_cuda reads the arch from the current Target
        return nvcc.compile_cuda(cuda_source(lib), target_format="fatbin", compiler="nvcc")


def _build_and_export(mod, target, params: bytes | None) -> str:
    """One candidate, in a worker: built, exported as MetaSchedule's runners load it; the artifact's
    path."""
    return default_export(
        build_candidate(
            mod, target, None if params is None else tvm.runtime.load_param_dict(params)
        )
    )


@derived_object
class PooledBuilder(PyBuilder):
    """MetaSchedule's LocalBuilder with worker processes that outlive a round (see the module
    docstring).

    Parameters
    ----------
    max_workers
        Parallel builds; the host's CPU count when None.
    timeout_sec
        A build that takes longer is killed (its worker replaced) and reported as LocalBuilder
        reports it.
    deadline
        The tuning budget's end (``time.monotonic()``), or None: each round's builds get what
        :func:`~ms_heron.tuning.budget.budget_timeout` leaves then, not what was left when tuning
        began. LLVM hangs on some candidates (a float ``min`` reduction unrolled 64 deep), and
        a 30 s budget's late rounds waited 28 s for each.
    """

    def __init__(
        self,
        *,
        max_workers: int | None = None,
        timeout_sec: float = DEFAULT_TIMEOUT_S,
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.max_workers, self.timeout_sec, self.deadline = max_workers, timeout_sec, deadline
        self._pool: PopenPoolExecutor | None = None

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        timeout = min(self.timeout_sec, budget_timeout(self.deadline))
        if self._pool is None:
            self._pool = PopenPoolExecutor(
                max_workers=self.max_workers,
                timeout=timeout,
                maximum_process_uses=BUILDS_PER_WORKER,
            )
        # the pool reads its timeout at each call; its workers, warm, are kept
        self._pool._timeout = timeout  # pylint: disable=protected-access
        jobs = [
            (x.mod, x.target, None if x.params is None else tvm.runtime.save_param_dict(x.params))
            for x in build_inputs
        ]
        return [
            self._result(r, timeout)
            for r in self._pool.map_with_error_catching(lambda job: _build_and_export(*job), jobs)
        ]

    @staticmethod
    def _result(outcome, timeout: float) -> BuilderResult:
        if outcome.status == StatusKind.COMPLETE:
            return BuilderResult(outcome.value, None)
        if outcome.status == StatusKind.TIMEOUT:
            return BuilderResult(None, f"LocalBuilder: Timeout, killed after {timeout} seconds")
        return BuilderResult(None, f"LocalBuilder: An exception occurred\n{outcome.value}")


def remove_artifact(result: BuilderResult) -> None:
    """Delete a built candidate's exported module, as MetaSchedule's RemoveBuildArtifact does after
    a round (each build exports into a temporary directory of its own)."""
    shutil.rmtree(os.path.dirname(result.artifact_path), ignore_errors=True)


def local_builder(
    *,
    max_workers: int | None = None,
    timeout_sec: float = DEFAULT_TIMEOUT_S,
    deadline: float | None = None,
) -> PooledBuilder:
    """The builder ms_heron tunes with (any target), each round's timeout capped by
    ``deadline``."""
    return PooledBuilder(max_workers=max_workers, timeout_sec=timeout_sec, deadline=deadline)
