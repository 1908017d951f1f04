"""The ``ms-heron`` command.

* ``demo``: tune an int8 VNNI GEMM on this CPU and compare it with ONNX Runtime's
  ``MatMulInteger`` in the same run;
* ``tune``: tune a workload into a work dir with live progress, a wall-clock budget and an
  optional MetaSchedule baseline; re-running it on the same work dir resumes;
* ``tune-model``: tune every kernel of an ONNX model through Relax, save the compiled model and
  compare it with ONNX Runtime on the same file;
* ``report`` / ``show``: what a work dir found, as markdown + PNG, or as TVMScript + trace.

Errors a user can fix are printed as one line, exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
import tempfile
import time

from .relax import ModelError
from .session import TRIALS_PER_ROUND, RunError, RunSpec, TuningRun, summary_rows
from .targets import TargetError, cpu_name, num_cores, parse_target, require_vnni
from .testing import workloads
from .tune import NoValidRecord
from .workload import Workload, WorkloadError, load_kernel


class UsageError(ValueError):
    """A malformed option value; the message says what form it takes."""


#: Errors whose message already names the fix: shown without a traceback.
_USER_ERRORS = (TargetError, WorkloadError, RunError, NoValidRecord, UsageError, ModelError)


def _quiet_metaschedule(verbose: bool) -> None:
    """MetaSchedule logs every round to the console at INFO; keep that for ``-v``."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.INFO if verbose else logging.WARNING)


def _demo(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from .testing.baselines import BaselineUnavailable, onnxruntime_matmul_integer_seconds
    from .evaluate import build, run_and_check, time_lib
    from .testing.peak import vnni_peak_gops
    from .search import HeronSearch
    from .space import HeronSpace
    from .tune import best_schedule, tune_workload

    target = parse_target(args.target)
    M, N, K = args.shape
    workload = workloads.gemm(M=M, N=N, K=K, dtype="int8")
    cores = num_cores(target)
    print(f"ms-heron demo: int8 GEMM {M}x{N}x{K} (u8 x s8 -> s32) on {cpu_name(target)}, {cores} cores")
    print("search: HeronSpace + HeronSearch (constrained genetic search over CP-SAT solutions)")
    _quiet_metaschedule(args.verbose)
    with tempfile.TemporaryDirectory(prefix="ms_heron_demo_") as tmp:
        work_dir = args.work_dir or tmp
        print(f"tuning {args.trials} trials (records and logs in {work_dir}) ...", flush=True)
        start = time.perf_counter()
        db = tune_workload(
            workload,
            target,
            work_dir,
            args.trials,
            num_trials_per_iter=min(32, args.trials),
            space=HeronSpace(),
            strategy=HeronSearch(),
            seed=args.seed,
        )
        tuning_s = time.perf_counter() - start
        lib = build(best_schedule(db, workload, target).mod, target)
    run_and_check(lib, workload)
    tuned = time_lib(lib, workload)
    peak = vnni_peak_gops(target)
    try:
        ort_s = onnxruntime_matmul_integer_seconds(M, N, K, threads=cores)
    except BaselineUnavailable as err:
        ort_s = None
        print(f"note: {err}")
    print(f"tuned in {tuning_s:.0f} s; best kernel checked bit-exact against numpy")
    print(f"measured VNNI peak of this machine: {peak:.0f} GOPS")
    rows = [("ms_heron (tuned)", tuned.seconds)]
    if ort_s is not None:
        rows.append(("ONNX Runtime MatMulInteger", ort_s))
    print(f"{'':28s} {'latency':>11s} {'GOPS':>7s} {'% peak':>7s}")
    for name, secs in rows:
        gops = workload.ops / secs / 1e9
        print(f"{name:28s} {secs * 1e3:8.3f} ms {gops:7.1f} {100 * gops / peak:6.1f}%")
    if ort_s is not None:
        print(f"speed-up over ONNX Runtime: {ort_s / tuned.seconds:.2f}x")
    return 0


def _workload(args: argparse.Namespace) -> Workload:
    """A case name (``gemm.G1``), a family with ``--shape NAME=INT ...``, or ``kernel.py[:name]``."""
    if re.fullmatch(r".+\.py(:\w+)?", args.workload):
        if args.shape:
            raise UsageError(f"{args.workload} is a kernel with its own shapes; drop --shape")
        return load_kernel(args.workload)
    if "." in args.workload:
        if args.shape:
            raise UsageError(f"{args.workload} is a named case with a fixed shape; drop --shape or name a family")
        return workloads.case(args.workload, args.dtype)
    shape = {}
    for item in args.shape or []:
        match = re.fullmatch(r"(\w+)=(\d+)", item)
        if not match:
            raise UsageError(f"--shape takes NAME=INT items such as M=1024, got {item!r}")
        shape[match.group(1)] = int(match.group(2))
    if args.workload in workloads.FAMILIES and not shape:
        cases = [c for c in workloads.CASES if c.startswith(args.workload + ".")]
        raise UsageError(f"{args.workload} needs --shape (e.g. M=1024 N=1024 K=1024) or a named case such as {cases[0]}")
    return workloads.make(args.workload, args.dtype, **shape)


def parse_duration(text: str) -> float:
    """Seconds in ``90s``, ``10m``, ``1h30m`` or plain seconds."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise UsageError(f"--time-budget takes a duration such as 90s, 10m or 1h30m, got {text!r}")
    h, m, s = (int(g or 0) for g in match.groups())
    return float(3600 * h + 60 * m + s)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class _ProgressLine:
    """One status line per measured round; redrawn in place on a terminal."""

    def __init__(self, label: str, ops: float, trials: int, start_trials: int, budget_s: float | None):
        self.label, self.ops, self.trials, self.budget_s = label, ops, trials, budget_s
        self.start_trials, self.started = start_trials, time.monotonic()
        self.tty = sys.stdout.isatty()

    def __call__(self, p) -> None:
        spent = time.monotonic() - self.started
        done_here = p.trials - self.start_trials
        left = spent / done_here * (self.trials - p.trials) if done_here else math.inf
        if self.budget_s is not None:
            left = min(left, max(0.0, self.budget_s - spent))
        best = f"{p.best_seconds * 1e3:.4f} ms = {p.best_gops(self.ops):.1f} GOPS" if p.best_seconds < math.inf else "none yet"
        line = (
            f"{self.label}: {p.trials:4d}/{self.trials} trials | best {best} | valid {p.valid / max(p.trials, 1):.0%} "
            f"| {_clock(spent)} elapsed, ~{_clock(left) if left < math.inf else '?'} left"
        )
        print(("\r" + line.ljust(110)) if self.tty else line, end="" if self.tty else "\n", flush=True)

    def close(self) -> None:
        if self.tty:
            print(flush=True)


def _tune_arm(run: TuningRun, label: str, args: argparse.Namespace, trials: int, budget_s: float | None, default: bool):
    start = run.state()
    if start.trials >= trials:
        print(f"{label}: {start.trials} records already in {run.work_dir}; nothing to tune (raise --trials to go on)")
        return
    if start.trials:
        print(f"{label}: resuming from {start.trials} records in {run.work_dir}")
    show = _ProgressLine(label, run.workload.ops, trials, start.trials, budget_s)
    try:
        run.tune(trials, budget_s, on_round=show, metaschedule_default=default, per_round=args.round_size)
    finally:
        show.close()


def _tune(args: argparse.Namespace) -> int:
    workload = _workload(args)
    target = parse_target(args.target)
    if workload.dtype == "int8":
        require_vnni(target)
    if args.trials < 1 or args.round_size < 1:
        raise UsageError("--trials and --round-size must be at least 1")
    budget_s = parse_duration(args.time_budget) if args.time_budget else None
    work_dir = args.work_dir or f"ms_heron_runs/{workload.name}"
    _quiet_metaschedule(args.verbose)
    run = TuningRun.create(work_dir, RunSpec.of(workload, target, args.seed))
    print(f"ms-heron tune: {run.spec.describe()} on {cpu_name(run.target)}; records in {run.work_dir}")
    _tune_arm(run, "ms_heron", args, args.trials, budget_s, default=False)
    arms = [("ms_heron", run)]
    if args.baseline == "metaschedule":
        baseline = run.baseline()
        _tune_arm(baseline, "MetaSchedule default", args, run.state().trials, None, default=True)
        arms.append(("MetaSchedule default", baseline))
    _print_table(workload, arms)
    print(f"report with plots: ms-heron report {run.work_dir}; best schedule: ms-heron show {run.work_dir}")
    return 0


def _input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in items or []:
        match = re.fullmatch(r"([^:]+):(\d+(?:,\d+)*)", item)
        if not match:
            raise UsageError(f"--input-shape takes NAME:DIMS items such as x:1,128, got {item!r}")
        shapes[match.group(1)] = tuple(int(d) for d in match.group(2).split(","))
    return shapes


class _ModelProgressLine:
    """One line per measured round of model tuning: trials, the task just measured, model estimate."""

    def __init__(self, tasks: list[str], trials: int, budget_s: float | None):
        self.tasks, self.trials, self.budget_s = tasks, trials, budget_s
        self.started = time.monotonic()

    def __call__(self, p) -> None:
        spent = time.monotonic() - self.started
        model = f"{p.best_seconds * 1e3:.3f} ms" if p.best_seconds < math.inf else "? (tasks untried)"
        budget = f" of {_clock(self.budget_s)}" if self.budget_s is not None else ""
        print(
            f"  {p.trials:4d}/{self.trials} trials | task {self.tasks.index(p.task) + 1}/{len(self.tasks)} {p.task}: "
            f"best {p.task_seconds * 1e3:.4f} ms | model ~{model} | {_clock(spent)}{budget}",
            flush=True,
        )


def _tune_model(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from pathlib import Path

    import numpy as np

    from .relax import compile_model, run_model, task_table, time_model
    from .testing.baselines import BaselineUnavailable, onnxruntime_model

    path = Path(args.model)
    if not path.is_file():
        raise UsageError(f"no ONNX model at {path}")
    if args.trials < 1 or args.round_size < 1:
        raise UsageError("--trials and --round-size must be at least 1")
    budget_s = parse_duration(args.time_budget) if args.time_budget else None
    target = parse_target(args.target)
    work_dir = Path(args.work_dir or f"ms_heron_models/{path.stem}")
    run = TuningRun.create(work_dir, RunSpec.of_model(path, _input_shapes(args.input_shape), target, args.seed))
    output = Path(args.output or work_dir / f"{path.stem}_tuned.so")
    tasks = [t.name for t in run.task_times()]
    print(f"ms-heron tune-model: {path.name}, {len(tasks)} tasks, {args.trials} trials on {cpu_name(run.target)}; "
          f"records in {work_dir}")
    _quiet_metaschedule(args.verbose)
    start = run.state()
    if start.trials >= args.trials:
        print(f"{start.trials} records already in {work_dir}; nothing to tune (raise --trials to go on)")
    else:
        if start.trials:
            print(f"resuming from {start.trials} records in {work_dir}")
        run.tune(args.trials, budget_s, on_round=_ModelProgressLine(tasks, args.trials, budget_s), per_round=args.round_size)
    print("\nper task (best kernel measured while tuning, calls per model run, share of the model estimate):")
    print("\n".join(task_table({"ms_heron": run.task_times()})))
    db = run.database()
    executable = compile_model(db, run.model, None, run.target)
    output.parent.mkdir(parents=True, exist_ok=True)
    executable.export_library(str(output))
    rng = np.random.default_rng(args.seed)
    inputs = {p.name: _random_input(rng, p) for p in run.model["main"].params}
    outputs, tuned_s = run_model(executable, inputs), time_model(executable, inputs)
    print(f"tuned in {run.state().elapsed_s:.0f} s; compiled model: {output} "
          "(load with tvm.runtime.load_module, run with relax.VirtualMachine)")
    print(f"report with plots: ms-heron report {work_dir}; a task's best schedule: ms-heron show {work_dir} TASK")
    print(f"{'ms_heron (tuned)':28s}{tuned_s * 1e3:10.3f} ms")
    try:
        import onnx

        ort_outputs, ort_s = onnxruntime_model(onnx.load(str(path)), dict(zip(_onnx_input_names(path), inputs.values())),
                                               threads=num_cores(run.target))
    except BaselineUnavailable as err:
        print(f"note: {err}")
        return 0
    diff = max(float(np.abs(a - b).max()) for a, b in zip(outputs, ort_outputs))
    print(f"{'ONNX Runtime':28s}{ort_s * 1e3:10.3f} ms")
    print(f"speed-up over ONNX Runtime: {ort_s / tuned_s:.2f}x; max abs difference of the outputs: {diff:.3g}")
    return 0


def _random_input(rng, param):
    """A deterministic input for a Relax parameter: normal floats, small non-negative integers."""
    shape, dtype = [int(d) for d in param.ty.shape.values], str(param.ty.dtype)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 8, size=shape).astype(dtype)


def _onnx_input_names(path) -> list[str]:
    import onnx  # pylint: disable=import-outside-toplevel

    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in weights]


def _print_table(workload: Workload, arms: list) -> None:
    rows = summary_rows([r.state() for _, r in arms], workload.ops)
    print(f"\n{'':22s}" + "".join(f"{label:>24s}" for label, _ in arms))
    for name, cells in rows.items():
        print(f"{name:22s}" + "".join(f"{c:>24s}" for c in cells))


def _report(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from .report import write
    from .testing.peak import vnni_peak_gops

    run = TuningRun.open(args.work_dir)
    peak = vnni_peak_gops(run.target) if run.spec.dtype == "int8" else None
    report, curve = write(run, peak_gops=peak)
    print(report.read_text())
    print(f"wrote {report} and {curve}")
    return 0


def _show(args: argparse.Namespace) -> int:
    run = TuningRun.open(args.work_dir)
    if args.task and not run.is_model:
        raise UsageError(f"{run.work_dir} tunes one kernel ({run.spec.describe()}); drop the task name")
    sch = run.best_schedule(args.task or "")
    what = f"task {args.task} of {run.spec.describe()}" if args.task else run.spec.describe()
    print(f"# best schedule of {what} in {run.work_dir}\n")
    print(sch.mod.script())
    print("\n# its trace\n")
    print(sch.trace)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ms-heron", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="tune an int8 VNNI GEMM on this CPU and compare with ONNX Runtime")
    demo.add_argument("--shape", type=int, nargs=3, metavar=("M", "N", "K"), default=(512, 512, 512))
    demo.add_argument("--trials", type=int, default=64, help="measured candidates (default 64)")
    demo.add_argument("--target", default="host", help='"host" (default), a tag, or a JSON target dict')
    demo.add_argument("--work-dir", help="keep the tuning database and logs here (default: a temp dir)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's per-round logs")
    demo.set_defaults(run=_demo)

    tune = sub.add_parser("tune", help="tune a workload into a work dir (re-run to resume)")
    tune.add_argument("workload", help=f"a case such as gemm.G1, a family ({', '.join(workloads.FAMILIES)}) with --shape, "
                      "or your TVMScript kernel as kernel.py[:name]")
    tune.add_argument("--shape", nargs="+", metavar="NAME=INT", help="the family's dimensions, e.g. M=512 N=512 K=512")
    tune.add_argument("--dtype", default="int8", choices=list(workloads.DTYPES), help="a case's or family's form (a kernel has its own)")
    tune.add_argument("--target", default="host", help='"host" (default), a tag, or a JSON target dict')
    tune.add_argument("--trials", type=int, default=200, help="records the work dir should hold in the end (default 200)")
    tune.add_argument("--time-budget", help="wall-clock limit such as 10m; the round in flight finishes first")
    tune.add_argument("--work-dir", help="database, logs and progress (default: ms_heron_runs/<workload>)")
    tune.add_argument("--round-size", type=int, default=TRIALS_PER_ROUND, help=f"candidates measured per round (default {TRIALS_PER_ROUND})")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument(
        "--baseline", choices=["metaschedule"], help="also tune with MetaSchedule's default search, same trials, in <work-dir>/baseline"
    )
    tune.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's per-round logs")
    tune.set_defaults(run=_tune)

    model = sub.add_parser("tune-model", help="tune every kernel of an ONNX model, compile it, compare with ONNX Runtime")
    model.add_argument("model", help="an .onnx file")
    model.add_argument("--input-shape", nargs="+", metavar="NAME:DIMS", help="static shapes for symbolic inputs, e.g. x:1,128")
    model.add_argument("--trials", type=int, default=200, help="records over all tasks the work dir should hold in the end (default 200)")
    model.add_argument("--time-budget", help="wall-clock limit such as 30m; rounds in flight finish first")
    model.add_argument("--target", default="host", help='"host" (default), a tag, or a JSON target dict')
    model.add_argument("--work-dir", help="database and logs (default: ms_heron_models/<model>); re-run to resume")
    model.add_argument("--output", help="compiled model library (default: <work-dir>/<model>_tuned.so)")
    model.add_argument("--round-size", type=int, default=16, help="candidates measured per task round (default 16)")
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's per-round logs")
    model.set_defaults(run=_tune_model)

    report = sub.add_parser("report", help="markdown summary and PNG tuning curve of a work dir")
    report.add_argument("work_dir")
    report.set_defaults(run=_report)

    show = sub.add_parser("show", help="the best schedule of a work dir (of one task of a model) as TVMScript and trace")
    show.add_argument("work_dir")
    show.add_argument("task", nargs="?", help="a model run's task (the names `report` and `tune-model` list)")
    show.set_defaults(run=_show)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except _USER_ERRORS as err:
        print(f"ms-heron: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
