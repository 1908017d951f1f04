"""Whole models through Relax: ONNX import (:mod:`.frontend`), the graph rewrites (:mod:`.passes`), lowering to fused
tuning tasks, per-task times and compiling with a database (:mod:`.lowering`)."""

from .frontend import from_onnx
from .lowering import (ModelError, TaskTime, bind_params, compile_model, extract_tasks, lower_for_tuning,
                       require_static_shapes, run_model, task_table, task_times, time_model, untuned_tasks)

__all__ = [
    "ModelError",
    "TaskTime",
    "bind_params",
    "compile_model",
    "extract_tasks",
    "from_onnx",
    "lower_for_tuning",
    "require_static_shapes",
    "run_model",
    "task_table",
    "task_times",
    "time_model",
    "untuned_tasks",
]
