"""What every ``ms-heron`` command shares: its user errors, the shared options, durations, clocks."""

from __future__ import annotations

import argparse
import logging
import re

from ..relax import ModelError
from ..session import RunError
from ..targets import TargetError
from ..tune import NoValidRecord
from ..workload import WorkloadError


class UsageError(ValueError):
    """A malformed option value; the message says what form it takes."""


#: Errors whose message already names the fix: shown without a traceback.
USER_ERRORS = (TargetError, WorkloadError, RunError, NoValidRecord, UsageError, ModelError)


def shared_options() -> argparse.ArgumentParser:
    """The options every tuning command takes (a parent parser)."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--target", default="host", help='"host" (default), a tag, or a JSON target dict')
    shared.add_argument("--seed", type=int, default=0)
    shared.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's per-round logs")
    return shared


def quiet_metaschedule(verbose: bool) -> None:
    """MetaSchedule logs every round to the console at INFO; keep that for ``-v``."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.INFO if verbose else logging.WARNING)


def parse_duration(text: str) -> float:
    """Seconds in ``90s``, ``10m``, ``1h30m`` or plain seconds."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise UsageError(f"--time-budget takes a duration such as 90s, 10m or 1h30m, got {text!r}")
    h, m, s = (int(g or 0) for g in match.groups())
    return float(3600 * h + 60 * m + s)


def clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
