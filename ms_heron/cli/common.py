"""What every ``ms-heron`` command shares: the shared options, durations, clocks, CTRL-C, one tuning
arm."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading

from ..errors import HeronError
from ..tuning.budget import BUDGET_BOUND_TRIALS, budget_timeout
from ..tuning.measure import Tracker


class UsageError(HeronError, ValueError):
    """A malformed option value; the message says what form it takes."""


def shared_options() -> argparse.ArgumentParser:
    """The options every tuning command takes (a parent parser)."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--target", default="host", help='"host" (default), a tag, or a JSON target dict'
    )
    shared.add_argument("--seed", type=int, default=0)
    shared.add_argument(
        "-v", "--verbose", action="store_true", help="show MetaSchedule's per-round logs"
    )
    shared.add_argument(
        "--pretrained-model",
        action="store_true",
        help="start ms_heron's cost model from the pretrained one it ships instead of untrained",
    )
    return shared


def add_measure_options(parser: argparse.ArgumentParser) -> None:
    """Where candidates are measured (``tune`` and ``tune-model``)."""
    parser.add_argument(
        "--rpc",
        metavar="HOST:PORT:KEY",
        help="measure on the servers a TVM RPC tracker holds for KEY (builds stay on this machine)",
    )


def runner(args: argparse.Namespace, *, cold: bool, deadline: float | None):
    """The runner ``--rpc`` asks for (the tracker checked first), or None for the local one; a
    session's timeout is capped by the deadline, as the local runner's is."""
    if not args.rpc:
        return None
    tracker = Tracker.parse(args.rpc)
    measuring = tracker.runner(cold=cold, timeout_s=budget_timeout(deadline))
    print(
        f"measuring on {measuring.width} RPC server(s) of key {tracker.key!r} at "
        f"{tracker.host}:{tracker.port}"
    )
    return measuring


#: Records a run holds in the end when the user gives neither ``--trials`` nor ``--time-budget``.
DEFAULT_TRIALS = 200


def add_trials_and_budget(parser: argparse.ArgumentParser, records: str) -> None:
    """``--trials`` and ``--time-budget`` (``tune`` and ``tune-model``); ``records`` names what the
    trials count."""
    parser.add_argument(
        "--trials",
        type=int,
        help=f"{records} the work dir should hold in the end (default {DEFAULT_TRIALS}, or as "
        "many as --time-budget measures when only it is given; max_trials_global in Python)",
    )
    parser.add_argument(
        "--time-budget",
        help="wall-clock limit such as 10m, set-up included; past it nothing more is measured "
        "(candidates left unmeasured wait for a resume; each task's first round still gets a "
        "valid kernel)",
    )


def trials_and_budget(args: argparse.Namespace) -> tuple[int, float | None]:
    """The records to tune to and the budget in seconds: ``--trials``, else
    :data:`DEFAULT_TRIALS` without a budget and :data:`BUDGET_BOUND_TRIALS` with one."""
    if (args.trials is not None and args.trials < 1) or args.round_size < 1:
        raise UsageError("--trials and --round-size must be at least 1")
    budget_s = parse_duration(args.time_budget) if args.time_budget else None
    if args.trials is not None:
        return args.trials, budget_s
    return (DEFAULT_TRIALS if budget_s is None else BUDGET_BOUND_TRIALS), budget_s


def trials_done(done: int, trials: int) -> str:
    """``done/trials trials`` for a progress line, ``done trials`` where the budget ends tuning."""
    return f"{done:4d} trials" if trials == BUDGET_BOUND_TRIALS else f"{done:4d}/{trials} trials"


def quiet_metaschedule(verbose: bool) -> None:
    """MetaSchedule logs every round to the console at INFO; keep that for ``-v``."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(
        logging.INFO if verbose else logging.WARNING
    )


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


class Interrupts:
    """CTRL-C during tuning: the first stops after the round in flight (everything measured is
    stored), the second exits at once (records already written stay; a torn last line is cut on
    resume).

    SIGINT is blocked in this thread before TVM starts its builder and runner workers, which inherit
    the mask: a CTRL-C at the terminal reaches the whole process group and would otherwise kill the
    workers and fail the round in flight. A thread here waits for it; a SIGINT that a thread
    started earlier takes goes to the same count through Python's handler.
    """

    def __init__(self, work_dir) -> None:
        self.work_dir = work_dir
        self.asked = threading.Event()
        self.count = 0
        self.lock = threading.Lock()

    def __enter__(self) -> "Interrupts":
        signal.signal(signal.SIGINT, lambda *_: self._interrupted())
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        threading.Thread(target=self._wait, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        # workers may still be alive: the mask and the waiting thread stay until the process ends
        pass

    def stop_requested(self) -> bool:
        return self.asked.is_set()

    def _wait(self) -> None:
        while True:
            signal.sigwait({signal.SIGINT})
            self._interrupted()

    def _interrupted(self) -> None:
        with self.lock:
            self.count += 1
            first = self.count == 1
        if first:
            self.asked.set()
            print(
                "\nms-heron: stopping after the round in flight (CTRL-C again to stop now)",
                file=sys.stderr,
                flush=True,
            )
            return
        print(
            f"\nms-heron: stopped; the records stored in {self.work_dir} are kept: run the same "
            "command to resume",
            file=sys.stderr,
            flush=True,
        )
        os._exit(130)  # pylint: disable=protected-access  # at once: no clean-up would be quick


def tune_arm(run, trials: int, *, label: str, interrupts: Interrupts, **options) -> bool:
    """Tune (or resume) ``run`` up to ``trials`` records through :meth:`TuningRun.tune`, saying so
    in one line when it resumes or has nothing to do; False when CTRL-C stopped it (said too)."""
    run.tune(
        trials,
        stop=interrupts.stop_requested,
        say=lambda line: print(f"{label}: {line}", flush=True),
        **options,
    )
    if interrupts.stop_requested():
        print(
            f"interrupted: every measured record is stored in {run.work_dir}; run the same command "
            "to resume"
        )
        return False
    return True
