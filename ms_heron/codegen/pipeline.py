"""The TIR pipeline every ms_heron CPU build runs: its passes, then TVM's default."""

from __future__ import annotations

import tvm
from tvm.target import Target

from ..hardware.targets import is_cpu
from .amx_tiles import finish_amx_kernels
from .prefetch import inject_panel_prefetch

#: The name :func:`cpu_pipeline` registers the pipeline under.
PIPELINE = "ms_heron_cpu"


def cpu_pipeline() -> str:
    """The TIR pipeline of every CPU build (``tvm.compile(..., tir_pipeline=cpu_pipeline())``):
    :func:`inject_panel_prefetch` and :func:`finish_amx_kernels`, then TVM's default. Registered
    on first use, in each process (build workers included)."""
    from tvm.tirx import compilation_pipeline  # pylint: disable=import-outside-toplevel

    if PIPELINE not in compilation_pipeline.PIPELINE_MAP:
        compilation_pipeline.register_tir_pipeline(PIPELINE, _pipeline)
    return PIPELINE


def tir_pipeline(target: Target) -> str:
    """The TIR pipeline ``tvm.compile`` builds for ``target`` with: :func:`cpu_pipeline` on a CPU,
    TVM's default elsewhere."""
    return cpu_pipeline() if is_cpu(target) else "default"


def _pipeline():
    default, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("s_tir")
    return (
        tvm.transform.Sequential([inject_panel_prefetch(), finish_amx_kernels(), default]),
        finalize_host,
        finalize_device,
    )
