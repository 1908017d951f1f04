"""Tune a whole ONNX model with ms_heron, compile it, and compare it with ONNX Runtime.

The models are built in code (ms_heron.testing.models, no downloads): a BERT-base encoder layer in
fp32 or with int8 dense layers (ONNX Runtime's MatMulInteger form, which reaches the VNNI
instruction), or a ResNet-50 bottleneck block in fp32 or with int8 convolutions (ConvInteger). Run
from the repository root:

    .venv/bin/python examples/tune_onnx_model.py bert-int8 --trials 200
    .venv/bin/python examples/tune_onnx_model.py resnet --trials 100 --work-dir runs/resnet

The same works on any .onnx file with `ms-heron tune-model MODEL.onnx --input-shape x:1,128`.
"""

import argparse
import logging
import tempfile

import numpy as np

from ms_heron.hardware.targets import host_target, num_cores
from ms_heron.relax import compile_model, from_onnx, run_model, time_model
from ms_heron.report.baselines import onnxruntime_model
from ms_heron.testing import models
from ms_heron.tuning import tune_model

# per-round logs stay in the work dir
logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("model", choices=list(models.ZOO))
parser.add_argument("--trials", type=int, default=200, help="measured candidates over all kernels")
parser.add_argument("--work-dir", help="keep the tuning records here (default: a temporary dir)")
args = parser.parse_args()

model, target = models.ZOO[args.model](), host_target()
mod = from_onnx(model.proto, model.input_shapes())  # Relax module, weights as constants
work_dir = args.work_dir or tempfile.mkdtemp(prefix="ms_heron_model_")


# the run's progress after each round; the last, once each task's best kernels were timed again
def show(
    p,
):
    where = (
        f"{p.task}: best {p.task_seconds * 1e3:.4f} ms" if p.task else "best kernels timed again"
    )
    print(f"{p.trials:4d}/{args.trials} trials, {where}, model ~{p.best_seconds * 1e3:.3f} ms")


# HeronSpace + HeronSearch
database = tune_model(mod, None, target, work_dir, args.trials, on_round=show)
executable = compile_model(database, mod, None, target)  # a relax.VirtualMachine executable

(ours,) = run_model(executable, model.inputs)
(theirs,), ort_s = onnxruntime_model(model.proto, model.inputs, threads=num_cores(target))
ours_s = time_model(executable, model.inputs)
print(
    f"{model.name}: ms_heron {ours_s * 1e3:.3f} ms, ONNX Runtime {ort_s * 1e3:.3f} ms "
    f"({ort_s / ours_s:.2f}x); max abs difference {np.abs(ours - theirs).max():.2g}; records in "
    f"{work_dir}"
)
