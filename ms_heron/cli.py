"""The ``ms-heron`` command.

``ms-heron demo`` tunes an int8 VNNI GEMM on this CPU and compares it with ONNX Runtime's
``MatMulInteger`` in the same run. Errors a user can fix are printed as one line, exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time

from . import workloads
from .targets import TargetError, cpu_name, num_cores, parse_target

#: Errors whose message already names the fix: shown without a traceback.
_USER_ERRORS = (TargetError, workloads.WorkloadError)


def _quiet_metaschedule(verbose: bool) -> None:
    """MetaSchedule logs every round to the console at INFO; keep that for ``-v``."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.INFO if verbose else logging.WARNING)


def _demo(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from .baselines import BaselineUnavailable, onnxruntime_matmul_integer_seconds
    from .evaluate import build, run_and_check, time_lib
    from .peak import vnni_peak_gops
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
