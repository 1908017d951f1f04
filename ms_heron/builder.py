"""A MetaSchedule LocalBuilder that does not re-import TVM's tensor-intrinsic registry per batch.

LocalBuilder's default ``f_build`` imports ``tvm.s_tir.tensor_intrin`` (~15 s) in a fresh worker
pool on every ``build()`` call. Tensorized candidates do not need it at build time: the
intrinsic bodies are already inlined when the schedule is replayed, so the import is skipped here.
"""

from __future__ import annotations

from tvm.s_tir import meta_schedule as ms


def build_without_intrin_import(mod, target, _params):
    """``f_build`` for :class:`LocalBuilder`: MetaSchedule's default build minus the registry import."""
    # pylint: disable=import-outside-toplevel
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def local_builder(max_workers: int | None = None, timeout_sec: float = 30.0) -> ms.builder.LocalBuilder:
    """The builder ms_heron tunes with on CPU targets."""
    return ms.builder.LocalBuilder(
        max_workers=max_workers, timeout_sec=timeout_sec, f_build=build_without_intrin_import
    )
