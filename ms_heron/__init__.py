"""ms_heron: Heron's constraint-aware auto-scheduling as a plug-in for TVM 0.27 MetaSchedule.

Importing the package is cheap: it registers ms_heron's VNNI and AMX intrinsics (so their records
replay anywhere) and asks the OS for the AMX tile state, while TVM's tensor-intrinsic library (its
x86 part for a CPU target) is loaded only where tuning or tensorizing needs it
(:func:`ms_heron.intrinsics.ensure_registered`), and ``HeronSpace`` and ``HeronSearch`` are imported
when first used (:mod:`ms_heron.lazy`).
"""

import os

import psutil


def _use_all_physical_cores() -> None:
    """Let TVM's runtime thread pool use every physical core.

    TVM sizes its pool as ``hardware_concurrency / 2`` on x86, assuming hyper-threading; on a
    machine without SMT (this project's 2-core VMs) every kernel, measured or deployed, would run
    on half the cores. ``TVM_NUM_THREADS`` is read when the pool starts and inherited by
    MetaSchedule's runner processes; a value the user set is kept.
    """
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(cores))


_use_all_physical_cores()

__version__ = "0.1.0"

from .errors import HeronError  # noqa: E402  (after the thread-pool set-up above)
from .hardware.amx import request_amx_tile_state  # noqa: E402
from .intrinsics import register_all_amx, register_dot_products  # noqa: E402
from .lazy import lazy_attributes  # noqa: E402

# CPU records name ms_heron's dot-product and AMX intrinsics (HeronSpace adds MetaSchedule's spaces,
# which name TVM's, only where it tensorizes nothing): registered here, cheaply, so stock
# ``compile_tir`` and ``MetaScheduleApplyDatabase`` replay them in any process that imported
# ms_heron.
register_dot_products()
register_all_amx()
# AMX kernels run only in a process the OS granted the tile state: every process that imports
# ms_heron (MetaSchedule's runner workers, the one running a compiled model) asks for it here.
request_amx_tile_state()

__all__ = ["HeronError", "HeronSpace", "HeronSearch"]
__getattr__ = lazy_attributes(__name__, {"HeronSearch": ".search", "HeronSpace": ".space"})
