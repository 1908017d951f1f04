"""Whole models through Relax: ONNX import (:mod:`.frontend`), the graph rewrites (:mod:`.passes`),
lowering to fused tuning tasks and compiling with a database (:mod:`.lowering`), and the tasks'
times against their bounds (:mod:`.tasks`)."""

from .frontend import from_onnx
from .lowering import (
    ModelError,
    bind_params,
    compile_lowered,
    compile_model,
    lower_for_tuning,
    require_static_shapes,
    run_model,
    time_model,
)
from .tasks import Task, TaskTime, extract_tasks, model_tasks, task_times, untuned_tasks

__all__ = [
    "ModelError",
    "Task",
    "TaskTime",
    "bind_params",
    "compile_lowered",
    "compile_model",
    "extract_tasks",
    "from_onnx",
    "lower_for_tuning",
    "model_tasks",
    "require_static_shapes",
    "run_model",
    "task_times",
    "time_model",
    "untuned_tasks",
]
