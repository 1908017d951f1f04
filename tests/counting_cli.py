"""``ms-heron`` as a user runs it, counting on the way (a test's probe, not product code): how often a
model is lowered (``lower_for_tuning``) and how often the one tuning path (``TuningRun.tune``) is
entered; and at its end, which modules of TVM's intrinsic library it imported (each is seconds of
TVMScript to parse: a CPU target needs x86's alone). They are printed as the last line of stderr, as JSON."""

import atexit
import functools
import json
import sys

import ms_heron.cli
import ms_heron.relax.lowering
from ms_heron.tuning.run import TuningRun

COUNTS = {"lower_for_tuning": 0, "TuningRun.tune": 0}
INTRINSIC_MODULES = "tvm.s_tir.tensor_intrin."


def counted(name, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        COUNTS[name] += 1
        return func(*args, **kwargs)

    return wrapper


lower = ms_heron.relax.lowering.lower_for_tuning
for module in [m for n, m in sys.modules.items() if n.startswith("ms_heron")]:
    if getattr(module, "lower_for_tuning", None) is lower:  # every module that imported it by name
        module.lower_for_tuning = counted("lower_for_tuning", lower)
TuningRun.tune = counted("TuningRun.tune", TuningRun.tune)


@atexit.register
def _print_counts():
    intrinsics = sorted(n.removeprefix(INTRINSIC_MODULES) for n in sys.modules if n.startswith(INTRINSIC_MODULES))
    print(json.dumps({**COUNTS, "intrinsic modules": intrinsics}), file=sys.stderr, flush=True)


sys.exit(ms_heron.cli.main(sys.argv[1:]))
