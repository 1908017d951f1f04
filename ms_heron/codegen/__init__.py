"""How a scheduled kernel becomes CPU code: TVM's TIR pipeline with ms_heron's passes in front
(:mod:`.prefetch`), registered under one name that the builder, the model build and the suite's
build all pass to ``tvm.compile``."""

from .prefetch import PIPELINE, cpu_pipeline, inject_panel_prefetch, tir_pipeline

__all__ = ["PIPELINE", "cpu_pipeline", "inject_panel_prefetch", "tir_pipeline"]
