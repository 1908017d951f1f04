"""``ms-heron`` as a user runs it, counting on the way (a test's probe, not product code): how often
a model is lowered (``lower_for_tuning``), its tasks extracted (``extract_tasks``) and its records
read from the work dir (``first_records``, ``open_database``; the records store's reads are not
counted), and how often the one tuning path (``TuningRun.tune``) is entered; the ms_heron modules on
the call path from the command to the first record stored; and at its end, which modules of TVM's
intrinsic library it imported (each is seconds of TVMScript to parse: a CPU target needs x86's
alone). Run as a script, they are printed as the last line of stderr, as JSON; imported,
:func:`install` counts in this process."""

import atexit
import functools
import json
import sys
import threading
import traceback
from pathlib import Path

import ms_heron.cli
import ms_heron.records
import ms_heron.relax.lowering
import ms_heron.relax.tasks
import ms_heron.tuning.api  # noqa: F401  (every module that names the counted functions, imported first)
from ms_heron.tuning.run import TuningRun
from ms_heron.tuning.store import RecordStore

COUNTS = {"lower_for_tuning": 0, "extract_tasks": 0, "database reads": 0, "TuningRun.tune": 0}
INTRINSIC_MODULES = "tvm.s_tir.tensor_intrin."


def _counted(name, func, counts=lambda *args, **kwargs: True):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        COUNTS[name] += counts(*args, **kwargs)
        return func(*args, **kwargs)

    return wrapper


def _in_work_dir(directory, *_args, **_kwargs) -> bool:
    """A read of a work dir's records, not of the records store's."""
    return not Path(directory).resolve().is_relative_to(RecordStore().root.resolve())


def _count_everywhere(name, func, counts=lambda *args, **kwargs: True) -> None:
    """Count calls of ``func`` (those ``counts`` accepts) in every ms_heron module that imported it
    by name, and its own."""
    counted = _counted(name, func, counts)
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("ms_heron")]:
        if getattr(module, func.__name__, None) is func:
            setattr(module, func.__name__, counted)


def install() -> dict:
    """Start counting in this process (once); the counts, updated as calls happen."""
    if not hasattr(TuningRun.tune, "__wrapped__"):
        _count_everywhere("lower_for_tuning", ms_heron.relax.lowering.lower_for_tuning)
        _count_everywhere("extract_tasks", ms_heron.relax.tasks.extract_tasks)
        _count_everywhere("database reads", ms_heron.records.first_records, _in_work_dir)
        _count_everywhere("database reads", ms_heron.records.open_database, _in_work_dir)
        TuningRun.tune = _counted("TuningRun.tune", TuningRun.tune)
    return COUNTS


#: The ms_heron modules, outermost first, on the Python stack where the first record was stored.
STORE_PATH: list[str] = []


def _watch_the_first_store(frame, event, _arg):
    code = frame.f_code
    if (
        event == "call"
        and not STORE_PATH
        and code.co_name == "apply"
        and code.co_filename.endswith("records.py")
    ):
        STORE_PATH.extend(
            f.filename.split("ms_heron/")[-1]
            for f in traceback.extract_stack(frame)
            if "/ms_heron/" in f.filename
        )
        sys.setprofile(None)
        threading.setprofile(None)


def _print_counts():
    intrinsics = sorted(
        n.removeprefix(INTRINSIC_MODULES) for n in sys.modules if n.startswith(INTRINSIC_MODULES)
    )
    print(
        json.dumps({**COUNTS, "store path": STORE_PATH, "intrinsic modules": intrinsics}),
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    install()
    atexit.register(_print_counts)
    sys.setprofile(_watch_the_first_store)
    threading.setprofile(_watch_the_first_store)
    sys.exit(ms_heron.cli.main(sys.argv[1:]))
