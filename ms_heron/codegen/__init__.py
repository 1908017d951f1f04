"""How a scheduled kernel becomes CPU code: TVM's TIR pipeline with ms_heron's passes in front
(:mod:`.prefetch`, :mod:`.amx_tiles`), registered under one name that the builder, the model build
and the suite's build all pass to ``tvm.compile``."""

from .amx_tiles import finish_amx_kernels
from .pipeline import PIPELINE, cpu_pipeline, tir_pipeline
from .prefetch import inject_panel_prefetch

__all__ = [
    "PIPELINE",
    "cpu_pipeline",
    "finish_amx_kernels",
    "inject_panel_prefetch",
    "tir_pipeline",
]
