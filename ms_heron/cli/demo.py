"""``ms-heron demo``: tune a GEMM on this CPU and compare it with ONNX Runtime in the same run:
int8 (u8 x s8 -> s32, against ``MatMulInteger``) on every x86 CPU with AVX2, whose dot products beat
its fp32 FMA, else fp32 (against ``MatMul``)."""

from __future__ import annotations

import argparse
import tempfile
import time

from .. import workloads
from ..hardware.dot_products import native_dtype, require_dot_product
from ..hardware.targets import cpu_name, num_cores, parse_target
from .common import Interrupts, quiet_metaschedule, tune_arm


def add_parser(sub, shared: argparse.ArgumentParser) -> None:
    demo = sub.add_parser(
        "demo", parents=[shared], help="tune a GEMM on this CPU and compare with ONNX Runtime"
    )
    demo.add_argument(
        "--shape", type=int, nargs=3, metavar=("M", "N", "K"), default=(512, 512, 512)
    )
    demo.add_argument(
        "--dtype",
        choices=["int8", "fp32"],
        help="int8 (exact u8 x s8 -> s32, with the best dot product the CPU has) or fp32; default "
        "int8 on every x86 CPU with AVX2 (it beats fp32 there), else fp32",
    )
    demo.add_argument("--trials", type=int, default=64, help="measured candidates (default 64)")
    demo.add_argument(
        "--work-dir", help="keep the tuning database and logs here (default: a temp dir)"
    )
    demo.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from ..hardware.peak import unit_peak
    from ..report.baselines import (
        BaselineUnavailable,
        onnxruntime_int8_saturates,
        onnxruntime_matmul_integer_seconds,
        onnxruntime_operator_seconds,
    )
    from ..tuning.loop import TRIALS_PER_ROUND
    from ..tuning.run import TuningRun
    from ..tuning.workdir import RunSpec
    from ..workloads.evaluate import build, run_and_check, time_lib

    target = parse_target(args.target)
    dtype = args.dtype or native_dtype(target)
    M, N, K = args.shape
    int8 = dtype == "int8"
    dot = require_dot_product(target) if int8 else None
    workload = workloads.make("gemm", dtype, target=target, M=M, N=N, K=K)
    cores = num_cores(target)
    form = f"int8 GEMM {{}}x{{}}x{{}} (u8 x s8 -> s32, {dot.isa})" if dot else "fp32 GEMM {}x{}x{}"
    print(f"ms-heron demo: {form.format(M, N, K)} on {cpu_name(target)}, {cores} cores")
    print("search: HeronSpace + HeronSearch (constrained genetic search over CP-SAT solutions)")
    quiet_metaschedule(args.verbose)
    with tempfile.TemporaryDirectory(prefix="ms_heron_demo_") as tmp:
        run = TuningRun.create(args.work_dir or tmp, RunSpec.of(workload, target, args.seed))
        print(f"tuning {args.trials} trials (records and logs in {run.work_dir}) ...", flush=True)
        start = time.perf_counter()
        with Interrupts(run.work_dir) as interrupts:
            if not tune_arm(
                run,
                args.trials,
                label="ms_heron",
                interrupts=interrupts,
                num_trials_per_iter=min(TRIALS_PER_ROUND, args.trials),
                pretrained_model=args.pretrained_model,
            ):
                return 130
        tuning_s = time.perf_counter() - start
        lib = build(run.best_schedule().mod, target)
    run_and_check(lib, workload)
    tuned = time_lib(lib, workload)
    unit, peak = unit_peak(target, dtype)
    ort_name = "ONNX Runtime MatMulInteger" if int8 else "ONNX Runtime MatMul"
    try:
        ort_s = (
            onnxruntime_matmul_integer_seconds(M, N, K, threads=cores)
            if int8
            else onnxruntime_operator_seconds(workload, threads=cores)
        )
    except BaselineUnavailable as err:
        ort_s = None
        print(f"note: {err}")
    if int8 and ort_s is not None and onnxruntime_int8_saturates():
        print(
            "note: ONNX Runtime's int8 kernels saturate pairs of products on this CPU (no VNNI): "
            f"its MatMulInteger is timed as it is, but it is not exact here; ms_heron's {dot.isa} "
            "kernel is"
        )
    print(
        f"tuned in {tuning_s:.0f} s; best kernel checked {'bit-exact ' if int8 else ''}against "
        "numpy"
    )
    print(f"measured {unit} peak of this machine: {peak:.0f} GOPS")
    rows = [("ms_heron (tuned)", tuned.seconds)]
    if ort_s is not None:
        rows.append((ort_name, ort_s))
    print(f"{'':28s} {'latency':>11s} {'GOPS':>7s} {'% peak':>7s}")
    for name, secs in rows:
        gops = workload.ops / secs / 1e9
        print(f"{name:28s} {secs * 1e3:8.3f} ms {gops:7.1f} {100 * gops / peak:6.1f}%")
    if ort_s is not None:
        print(f"speed-up over ONNX Runtime: {ort_s / tuned.seconds:.2f}x")
    return 0
