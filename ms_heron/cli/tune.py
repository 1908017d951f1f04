"""``ms-heron tune``: tune a suite workload or a user's kernel into a work dir with live progress, a
wall-clock budget and an optional MetaSchedule baseline; re-running it on the same work dir
resumes."""

from __future__ import annotations

import argparse
import math
import re
import sys
import time

from .. import workloads
from ..hardware.dot_products import native_dtype, require_dot_product
from ..hardware.targets import cpu_name, parse_target, runs_here
from ..report.tables import summary_rows
from ..tuning.budget import deadline_after, seconds_left
from ..tuning.loop import TRIALS_PER_ROUND
from ..tuning.run import TuningRun
from ..tuning.setup import Search
from ..tuning.workdir import RunSpec
from ..workloads import Workload, load_kernel
from .common import (
    Interrupts,
    UsageError,
    add_measure_options,
    add_trials_and_budget,
    clock,
    quiet_metaschedule,
    runner,
    trials_and_budget,
    trials_done,
    tune_arm,
)


def add_parser(sub, shared: argparse.ArgumentParser) -> None:
    tune = sub.add_parser(
        "tune", parents=[shared], help="tune a workload into a work dir (re-run to resume)"
    )
    tune.add_argument(
        "workload",
        help=f"a case such as gemm.G1, a family ({', '.join(workloads.FAMILIES)}) with --shape, "
        "or your TVMScript kernel as kernel.py[:name]",
    )
    tune.add_argument(
        "--shape",
        nargs="+",
        metavar="NAME=INT",
        help="the family's dimensions, e.g. M=512 N=512 K=512",
    )
    tune.add_argument(
        "--dtype",
        choices=list(workloads.DTYPES),
        help="a case's or family's form (a kernel has its own); default int8 on every x86 target "
        "with AVX2 (it beats fp32 there), else fp32",
    )
    add_trials_and_budget(tune, "records")
    tune.add_argument(
        "--work-dir", help="database, logs and progress (default: ms_heron_runs/<workload>)"
    )
    tune.add_argument(
        "--round-size",
        type=int,
        default=TRIALS_PER_ROUND,
        help=f"candidates measured per round (default {TRIALS_PER_ROUND}; num_trials_per_iter "
        "in Python)",
    )
    tune.add_argument(
        "--baseline",
        choices=["metaschedule"],
        help="also tune with MetaSchedule's default search, same trials, in <work-dir>/baseline",
    )
    add_measure_options(tune)
    tune.set_defaults(run=run)


def _workload(args: argparse.Namespace, dtype: str, target) -> Workload:
    """A case name (``gemm.G1``), a family with ``--shape NAME=INT ...``, or ``kernel.py[:name]``;
    an int8 one with its weight packed for the target's dot product."""
    if re.fullmatch(r".+\.py(:\w+)?", args.workload):
        if args.shape:
            raise UsageError(f"{args.workload} is a kernel with its own shapes; drop --shape")
        return load_kernel(args.workload)
    if "." in args.workload:
        if args.shape:
            raise UsageError(
                f"{args.workload} is a named case with a fixed shape; drop --shape or name a family"
            )
        return workloads.case(args.workload, dtype, target=target)
    shape = {}
    for item in args.shape or []:
        match = re.fullmatch(r"(\w+)=(\d+)", item)
        if not match:
            raise UsageError(f"--shape takes NAME=INT items such as M=1024, got {item!r}")
        shape[match.group(1)] = int(match.group(2))
    if args.workload in workloads.FAMILIES and not shape:
        cases = [c for c in workloads.CASES if c.startswith(args.workload + ".")]
        raise UsageError(
            f"{args.workload} needs --shape (e.g. M=1024 N=1024 K=1024) or a named case such as "
            f"{cases[0]}"
        )
    return workloads.make(args.workload, dtype, target=target, **shape)


class _ProgressLine:
    """One status line per measured round; redrawn in place on a terminal."""

    def __init__(
        self, label: str, ops: float, trials: int, start_trials: int, deadline: float | None
    ):
        self.label, self.ops, self.trials, self.deadline = label, ops, trials, deadline
        self.start_trials, self.started = start_trials, time.monotonic()
        self.tty = sys.stdout.isatty()

    def __call__(self, p) -> None:
        spent = time.monotonic() - self.started
        done_here = p.trials - self.start_trials
        left = spent / done_here * (self.trials - p.trials) if done_here else math.inf
        if self.deadline is not None:
            left = min(left, seconds_left(self.deadline))
        best = (
            f"{p.best_seconds * 1e3:.4f} ms = {p.best_gops(self.ops):.1f} GOPS"
            if p.best_seconds < math.inf
            else "none yet"
        )
        line = (
            f"{self.label}: {trials_done(p.trials, self.trials)} | best {best} | valid "
            f"{p.valid / max(p.trials, 1):.0%} | {clock(spent)} elapsed, "
            f"~{clock(left) if left < math.inf else '?'} left"
        )
        print(
            ("\r" + line.ljust(110)) if self.tty else line, end="" if self.tty else "\n", flush=True
        )

    def close(self) -> None:
        if self.tty:
            print(flush=True)


def _tune(
    run: TuningRun,
    *,
    label: str,
    args: argparse.Namespace,
    trials: int,
    deadline: float | None,
    search: Search,
    interrupts: Interrupts,
    measuring,
) -> bool:
    show = _ProgressLine(label, run.workload.ops, trials, len(run.seconds()), deadline)
    try:
        return tune_arm(
            run,
            trials,
            label=label,
            interrupts=interrupts,
            search=search,
            deadline=deadline,
            on_round=show,
            num_trials_per_iter=args.round_size,
            runner=measuring,
            pretrained_model=args.pretrained_model,
        )
    finally:
        show.close()


def run(args: argparse.Namespace) -> int:
    target = parse_target(args.target)
    workload = _workload(args, args.dtype or native_dtype(target), target)
    if workload.dtype == "int8":
        require_dot_product(target)  # a kernel file's int8 too
    trials, budget_s = trials_and_budget(args)
    deadline = deadline_after(budget_s)
    work_dir = args.work_dir or f"ms_heron_runs/{workload.name}"
    quiet_metaschedule(args.verbose)
    # before the work dir: a refused --rpc leaves none
    measuring = runner(args, cold=False, deadline=deadline)
    run = TuningRun.create(work_dir, RunSpec.of(workload, target, args.seed))
    print(
        f"ms-heron tune: {run.spec.describe()} on {cpu_name(run.target)}; records in {run.work_dir}"
    )
    with Interrupts(run.work_dir) as interrupts:
        done = _tune(
            run,
            label="ms_heron",
            args=args,
            trials=trials,
            deadline=deadline,
            search="heron",
            interrupts=interrupts,
            measuring=measuring,
        )
        arms = [("ms_heron", run)]
        if args.baseline == "metaschedule" and done:
            baseline = run.baseline()  # same trials as ms_heron measured, under the same budget
            done = _tune(
                baseline,
                label="MetaSchedule default",
                args=args,
                trials=run.state().trials,
                deadline=deadline_after(budget_s),
                search="metaschedule",
                interrupts=interrupts,
                measuring=measuring,
            )
            arms.append(("MetaSchedule default", baseline))
    _print_table(workload, arms)
    if not done:
        return 130
    _check_best(arms)
    print(
        f"report with plots: ms-heron report {run.work_dir}; best schedule: ms-heron show "
        f"{run.work_dir}"
    )
    return 0


def _check_best(arms: list) -> None:
    """Run each arm's best kernel once against the workload's reference before anyone trusts its
    time."""
    checked = []
    for label, arm_run in arms:
        if arm_run.state().best_seconds == math.inf:
            continue
        if not runs_here(arm_run.target):
            print(
                f"{label}: best kernel not checked (its target {cpu_name(arm_run.target)} does not "
                "run on this CPU)"
            )
            continue
        arm_run.check_best()  # WrongResult: exit 1
        checked.append(label)
    if checked:
        print(f"best kernel of {' and '.join(checked)} checked against the reference: correct")


def _print_table(workload: Workload, arms: list) -> None:
    rows = summary_rows([r.state() for _, r in arms], workload.ops)
    print(f"\n{'':22s}" + "".join(f"{label:>24s}" for label, _ in arms))
    for name, cells in rows.items():
        print(f"{name:22s}" + "".join(f"{c:>24s}" for c in cells))
