"""``ms-heron report`` and ``show``: what a work dir found, as markdown + PNG, or as TVMScript +
trace."""

from __future__ import annotations

import argparse

from ..tuning.run import TuningRun
from .common import UsageError


def add_parsers(sub) -> None:
    report = sub.add_parser("report", help="markdown summary and PNG tuning curve of a work dir")
    report.add_argument("work_dir")
    report.set_defaults(run=run_report)
    show = sub.add_parser(
        "show",
        help="the best schedule of a work dir (of one task of a model) as TVMScript and trace",
    )
    show.add_argument("work_dir")
    show.add_argument(
        "task", nargs="?", help="a model run's task (the names `report` and `tune-model` list)"
    )
    show.set_defaults(run=run_show)


def run_report(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from ..hardware.peak import unit_peak
    from ..hardware.targets import runs_here
    from ..report import write

    run = TuningRun.open(args.work_dir)
    peak = None  # also for another CPU's run: its peak cannot be measured here
    fp32_suite = run.spec.dtype == "fp32" and not run.spec.kernel
    if runs_here(run.target) and (run.spec.dtype == "int8" or fp32_suite):
        peak = unit_peak(run.target, run.spec.dtype)
    report, curve = write(run, peak)
    print(report.read_text())
    print(f"wrote {report} and {curve}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    run = TuningRun.open(args.work_dir)
    if args.task and not run.is_model:
        raise UsageError(
            f"{run.work_dir} tunes one kernel ({run.spec.describe()}); drop the task name"
        )
    sch = run.best_schedule(args.task or "")
    what = f"task {args.task} of {run.spec.describe()}" if args.task else run.spec.describe()
    print(f"# best schedule of {what} in {run.work_dir}\n")
    print(sch.mod.script())
    print("\n# its trace\n")
    print(sch.trace)
    return 0
