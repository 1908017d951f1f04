"""Tune a model written with Relax's nn frontend: a BERT-base feed-forward block (768 -> 3072 ->
768).

`nn.Module.export_tvm` names the function `forward` and leaves the weights as parameters;
`tune_model` / `compile_model` bind them by name. Run from the repository root:

    .venv/bin/python examples/tune_nn_module.py --trials 64
"""

import argparse
import logging
import math
import tempfile

import numpy as np
from tvm.relax.frontend import nn

from ms_heron.hardware.targets import host_target
from ms_heron.relax import compile_model, run_model, time_model
from ms_heron.tuning import tune_model


class FeedForward(nn.Module):
    """BERT's FFN with its residual and layer norm (post-norm), for a sequence of 128 tokens."""

    def __init__(self, hidden=768, inner=3072):
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return self.norm(self.down(nn.gelu(self.up(x))) + x)


# per-round logs stay in the work dir
logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--trials", type=int, default=64)
args = parser.parse_args()

mod, named_params = FeedForward().export_tvm(
    spec={"forward": {"x": nn.spec.Tensor((128, 768), "float32")}}
)
rng = np.random.default_rng(0)
params = {
    name: (rng.standard_normal([int(d) for d in p.shape]) * 0.02).astype("float32")
    for name, p in named_params
}
params["norm.weight"] = np.ones(768, "float32")
x = rng.standard_normal((128, 768)).astype("float32")

target = host_target()
with tempfile.TemporaryDirectory() as work_dir:
    database = tune_model(mod, params, target, work_dir, args.trials)
    executable = compile_model(database, mod, params, target)

(y,) = run_model(executable, {"x": x}, func="forward")


def reference(x):
    up = x @ params["up.weight"].T + params["up.bias"]
    gelu = 0.5 * up * (1 + np.vectorize(math.erf)(up / math.sqrt(2)))
    z = gelu @ params["down.weight"].T + params["down.bias"] + x
    z = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
    return z * params["norm.weight"] + params["norm.bias"]


print(
    f"FFN block: {time_model(executable, {'x': x}, func='forward') * 1e3:.3f} ms; "
    f"max abs difference from numpy {np.abs(y - reference(x)).max():.2g}"
)
