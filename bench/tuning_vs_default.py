"""ms_heron vs MetaSchedule's default space and evolutionary search, same run, same trials.

The ms_heron arm is HeronSpace with MetaSchedule's evolutionary search (``--search evolutionary``)
or with HeronSearch (``--search heron``). Per workload: share of measured candidates that built
and ran, best GOPS in the database, their ratio, the share of the peak measured in the same run
(VNNI for int8, FMA for fp32) and the libraries measured in the same run: ONNX Runtime
(MatMulInteger for int8 GEMMs; MatMul and Conv for fp32 GEMMs and convolutions) and numpy's BLAS for
fp32 GEMMs. Usage (repository root):

    .venv/bin/python bench/tuning_vs_default.py --trials 64 --dtype int8 --search evolutionary
    .venv/bin/python bench/tuning_vs_default.py --trials 64 200 --search heron --cases gemm.G1 bmm.B1 c2d.C3 c2d.C4
    .venv/bin/python bench/tuning_vs_default.py --trials 64 200 --search heron --dtype fp32 --cases gemm.G1
    .venv/bin/python bench/tuning_vs_default.py --trials 64 200 --search heron --dtype int8 --cases awkward

Writes bench/results/tuning_vs_default_<search>_<dtype>_<budgets>[_awkward].{md,json}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import results_io

from ms_heron import HeronSearch, HeronSpace
from ms_heron.evaluate import build, run_and_check, time_lib
from ms_heron.records import record_seconds
from ms_heron.search import WatchedSearch
from ms_heron.targets import host_target, num_cores
from ms_heron.testing import workloads
from ms_heron.testing.baselines import numpy_matmul_seconds, onnxruntime_matmul_integer_seconds, onnxruntime_operator_seconds
from ms_heron.testing.peak import fma_peak_gops, vnni_peak_gops
from ms_heron.tune import best_schedule, tune_workload

#: One representative Heron case per family, small enough for a 2-core machine.
CASES = ["gemm.G3", "bmm.B1", "gemv.V2", "c1d.C1", "c2d.C3", "c3d.C3", "dil.D3", "t2d.T1", "scan.S1"]
#: Shapes whose extents perfect tiles split badly (``--cases awkward``): 1000 classes, 197 and 127
#: tokens, a 30522-row vocabulary, 3 input channels.
AWKWARD = ["gemm.A1", "gemm.A2", "gemm.A3", "gemm.A4", "c2d.A5"]


def _summary(db, workload) -> dict:
    records = db.get_all_tuning_records()
    secs = [record_seconds(r.run_secs) for r in records]
    valid = [s for s in secs if s < float("inf")]
    best = min(valid) if valid else float("inf")
    return {
        "trials": len(records),
        "valid_share": len(valid) / len(records) if records else 0.0,
        "best_gops": workload.ops / best / 1e9 if valid else 0.0,
    }


def _library_gops(workload, target) -> dict[str, float]:
    """What a user would otherwise call on the same shape, by library name (empty if none)."""
    threads = num_cores(target)
    if workload.dtype == "int8":
        if workload.family != "gemm":
            return {}
        M, N, K = (workload.shape[k] for k in "MNK")
        return {"ONNX Runtime": workload.ops / onnxruntime_matmul_integer_seconds(M, N, K, threads=threads) / 1e9}
    out = {}
    if workload.family in ("gemm", "c2d"):
        out["ONNX Runtime"] = workload.ops / onnxruntime_operator_seconds(workload, threads) / 1e9
    if workload.family == "gemm":
        M, N, K = (workload.shape[k] for k in "MNK")
        out["numpy"] = workload.ops / numpy_matmul_seconds(M, N, K) / 1e9
    return out


def _tune(workload, target, trials: int, space, strategy) -> dict:
    watched = WatchedSearch(strategy)
    with tempfile.TemporaryDirectory() as work_dir:
        start = time.perf_counter()
        db = tune_workload(
            workload, target, work_dir, trials, num_trials_per_iter=32, space=space, strategy=watched, seed=0
        )
        total = time.perf_counter() - start
        lib = build(best_schedule(db, workload, target).mod, target)
    run_and_check(lib, workload)
    return {
        **_summary(db, workload),
        # The runner's few short repeats flatter small kernels; re-time the best one like the demo does.
        "retimed_gops": time_lib(lib, workload).gops,
        "tuning_s": total,
        "setup_s": watched.search_seconds[0],
        "search_s_per_round": watched.per_round_seconds(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[64])
    parser.add_argument("--dtype", default="int8", choices=["int8", "fp32"])
    parser.add_argument("--search", default="evolutionary", choices=["evolutionary", "heron"])
    parser.add_argument("--cases", nargs="*", default=CASES, help="case names, or 'awkward' for the padding rows")
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    args = parser.parse_args()
    if args.cases == ["awkward"]:
        args.cases = AWKWARD
    target = host_target()
    peak = vnni_peak_gops(target) if args.dtype == "int8" else fma_peak_gops(target)
    rows = []
    for trials in args.trials:
        for name in args.cases:
            workload = workloads.case(name, args.dtype)
            row = {"case": name, "dtype": args.dtype, "trials": trials, "peak_gops": peak}
            heron_strategy = HeronSearch() if args.search == "heron" else "evolutionary"
            row["default"] = _tune(workload, target, trials, "post-order-apply", "evolutionary")
            row["heron"] = _tune(workload, target, trials, HeronSpace(), heron_strategy)
            d, h = row["default"]["retimed_gops"], row["heron"]["retimed_gops"]
            row["ratio"] = h / d if d else None
            row["library_gops"] = _library_gops(workload, target)
            rows.append(row)
            print(json.dumps(row), flush=True)
    _report(args, rows)


def _report(args, rows) -> None:
    peak_name = "VNNI" if args.dtype == "int8" else "FMA"
    lines = [
        f"# ms_heron (HeronSpace + {args.search} search) vs MetaSchedule default ({args.dtype}, one run)",
        "",
        f"GOPS: each arm's best record rebuilt, checked against numpy and re-timed (median of 10 repeats of >= 100 ms). "
        f"% of peak: of the {peak_name} peak measured in the same run ({rows[0]['peak_gops']:.0f} GOPS). Libraries in the "
        "same run, operands fed as inputs. Search s/round: the strategy's own work per round of 32 "
        "(generating candidates and taking in results; build and measurement excluded).",
        "",
        "| case | trials | default valid | default GOPS | ms_heron valid | ms_heron GOPS | ms_heron / default "
        "| % of peak (default / ms_heron) | ms_heron / ONNX Runtime | ms_heron / numpy | search s/round default | search s/round ms_heron |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, h = r["default"], r["heron"]
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "n/a"
        peak = f"{d['retimed_gops'] / r['peak_gops']:.0%} / {h['retimed_gops'] / r['peak_gops']:.0%}"
        libs = [f"{h['retimed_gops'] / r['library_gops'][k]:.2f}x" if k in r["library_gops"] else "-" for k in ("ONNX Runtime", "numpy")]
        lines.append(
            f"| {r['case']} | {r['trials']} | {d['valid_share']:.0%} | {d['retimed_gops']:.0f} | {h['valid_share']:.0%} "
            f"| {h['retimed_gops']:.0f} | {ratio} | {peak} | {' | '.join(libs)} | {d['search_s_per_round']:.2f} | {h['search_s_per_round']:.2f} |"
        )
    for trials in args.trials:
        ratios = [r["ratio"] for r in rows if r["trials"] == trials and r["ratio"]]
        if ratios:
            lines += ["", f"Geometric mean ms_heron / default at {trials} trials: "
                      f"**{results_io.geomean(ratios):.2f}x** ({len(ratios)} cases)."]
    budgets = "_".join(str(t) for t in args.trials)
    subset = "_awkward" if args.cases == AWKWARD else ""
    results_io.write(args.out, f"tuning_vs_default_{args.search}_{args.dtype}_{budgets}{subset}", lines, rows)


if __name__ == "__main__":
    main()
