"""``ms-heron`` as a user runs it, counting three things on the way (a test's probe, not product code):
how often a model is lowered (``lower_for_tuning``), how often the one tuning path
(``TuningRun.tune``) is entered, and how many WMMA intrinsic groups are registered (seconds of
TVMScript that only a CUDA target needs). The counts are printed as the last line of stderr, as JSON."""

import atexit
import functools
import json
import sys

import ms_heron.cli
import ms_heron.relax.lowering
from ms_heron.intrinsics import WmmaGroup
from ms_heron.tuning.run import TuningRun

COUNTS = {"lower_for_tuning": 0, "TuningRun.tune": 0, "WmmaGroup.register": 0}


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
WmmaGroup.register = counted("WmmaGroup.register", WmmaGroup.register)
atexit.register(lambda: print(json.dumps(COUNTS), file=sys.stderr, flush=True))
sys.exit(ms_heron.cli.main(sys.argv[1:]))
