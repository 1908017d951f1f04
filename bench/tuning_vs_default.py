"""ms_heron vs MetaSchedule's default space and evolutionary search, same run, same trials.

The ms_heron arm is HeronSpace with HeronSearch (``--search heron``, the default) or with
MetaSchedule's evolutionary search (``--search evolutionary``). Per workload: share of measured
candidates that built and ran, best GOPS in the database, their ratio, the share of the peak
measured in the same run (AMX where the host runs it, else the CPU's dot product, for int8; FMA for
fp32) and the libraries measured in the same run: ONNX Runtime (MatMulInteger for int8 GEMMs; MatMul
and Conv for fp32 GEMMs and convolutions) and numpy's BLAS for fp32 GEMMs. Usage (repository root;
the last line measures what an AVX2 CPU gets):

    .venv/bin/python bench/tuning_vs_default.py --trials 64 --dtype int8 --search evolutionary
    .venv/bin/python bench/tuning_vs_default.py --trials 64 200 --cases gemm.G1 bmm.B1 c2d.C3 c2d.C4
    .venv/bin/python bench/tuning_vs_default.py --trials 64 200 --dtype fp32 --cases gemm.G1
    .venv/bin/python bench/tuning_vs_default.py --trials 64 200 --dtype int8 --cases awkward
    .venv/bin/python bench/tuning_vs_default.py --trials 200 --dtype int8 --cases gemm.G1 --isa avx2
    .venv/bin/python bench/tuning_vs_default.py --trials 200 --cases gemm.G1 --isa avx2 \
        --narrow-weights

``--narrow-weights`` gives int8 cases 7-bit weights, which CPUs without VNNI multiply as bytes
(``vpmaddubsw``; its own peak). The peak is measured at the start (the fastest of several bursts)
and again in each round of the timing, in turn with the kernels (a shared host's speed drifts).

Writes bench/results/tuning_vs_default_<search>_<dtype>_<budgets>[_awkward][_<isa>][_narrow]
.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable

import results_io

from ms_heron import workloads
from ms_heron.hardware.dot_products import dot_product, narrow_dot_product
from ms_heron.hardware.peak import unit_peak
from ms_heron.hardware.targets import ISA_MCPU, TargetError, host_target, narrowed, num_cores
from ms_heron.records import record_seconds
from ms_heron.report.baselines import (
    median_seconds,
    medians_in_turn,
    numpy_matmul,
    onnxruntime_matmul_integer,
    onnxruntime_operator,
)
from ms_heron.testing.int8 import adversarial_inputs
from ms_heron.tuning import RunSpec, Search, TuningRun
from ms_heron.workloads.evaluate import build, run_and_check, time_lib

#: Rounds in which both arms' best kernels and the libraries are timed in turn (medians kept).
TIMING_ROUNDS = 7
#: One representative Heron case per family, small enough for a 2-core machine.
CASES = [
    "gemm.G3",
    "bmm.B1",
    "gemv.V2",
    "c1d.C1",
    "c2d.C3",
    "c3d.C3",
    "dil.D3",
    "t2d.T1",
    "scan.S1",
]
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


def _library_calls(workload, target) -> dict[str, Callable[[], object]]:
    """What a user would otherwise call on the same shape, by library name (empty if none)."""
    threads = num_cores(target)
    if workload.dtype == "int8":
        if workload.family != "gemm":
            return {}
        M, N, K = (workload.shape[k] for k in "MNK")
        return {"ONNX Runtime": onnxruntime_matmul_integer(M, N, K, threads=threads)}
    out = {}
    if workload.family in ("gemm", "c2d"):
        out["ONNX Runtime"] = onnxruntime_operator(workload, threads)
    if workload.family == "gemm":
        M, N, K = (workload.shape[k] for k in "MNK")
        out["numpy"] = numpy_matmul(M, N, K)
    return out


def _tune(workload, target, dot, trials: int, search: Search, strategy=None) -> tuple[dict, object]:
    """One arm's tuning summary and its best kernel, built and checked (int8: on the adversarial
    inputs of ``dot``, the dot product the workload's weights are packed for)."""
    with tempfile.TemporaryDirectory() as work_dir:
        run = TuningRun.create(work_dir, RunSpec.of(workload, target, seed=0))
        start = time.perf_counter()
        run.tune(trials, search=search, strategy=strategy, num_trials_per_iter=32)
        total = time.perf_counter() - start
        lib = build(run.best_schedule().mod, target)
        summary = _summary(run.database(), workload)
        # the work dir goes with the block
        search_s_per_round = run.progress()[-1].search_s_per_round
    run_and_check(lib, workload)
    if workload.dtype == "int8":  # bit-exact where a saturating kernel would not be
        run_and_check(lib, workload, inputs=adversarial_inputs(workload, 0, dot))
    return {**summary, "tuning_s": total, "search_s_per_round": search_s_per_round}, lib


def _retimed_gops(workload, libs: dict, calls: dict, peak: Callable[[], float]) -> dict[str, float]:
    """Both arms' best kernels, the libraries and the ``peak`` probe (GOPS measured anew), timed in
    turn (the runner's few short repeats flatter small kernels, and the machine drifts between one
    timing and the next)."""
    samplers = {"peak": lambda: workload.ops / (peak() * 1e9)}  # seconds at the peak
    samplers.update(
        {
            arm: (lambda lib=lib: time_lib(lib, workload, repeat=3).seconds)
            for arm, lib in libs.items()
        }
    )
    samplers.update(
        {name: (lambda call=call: median_seconds(call, repeat=3)) for name, call in calls.items()}
    )
    return {
        name: workload.ops / secs / 1e9
        for name, secs in medians_in_turn(samplers, TIMING_ROUNDS).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[64])
    parser.add_argument("--dtype", default="int8", choices=["int8", "fp32"])
    parser.add_argument(
        "--search",
        default="heron",
        choices=["heron", "evolutionary"],
        help="the ms_heron arm's search strategy over HeronSpace (default: HeronSearch)",
    )
    parser.add_argument(
        "--cases", nargs="*", default=CASES, help="case names, or 'awkward' for the padding rows"
    )
    parser.add_argument(
        "--isa",
        choices=sorted(ISA_MCPU),
        help="compile for this instruction set, narrower than the host's",
    )
    parser.add_argument(
        "--narrow-weights",
        action="store_true",
        help="int8 with 7-bit weights, multiplied as bytes on CPUs without VNNI",
    )
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    args = parser.parse_args()
    if args.cases == ["awkward"]:
        args.cases = AWKWARD
    try:
        target = narrowed(host_target(), args.isa) if args.isa else host_target()
        dot = narrow_dot_product(target) if args.narrow_weights else dot_product(target)
    except TargetError as err:
        parser.error(str(err))
    if args.narrow_weights and args.dtype != "int8":
        parser.error("--narrow-weights is an int8 form")
    peak_unit, peak = unit_peak(target, args.dtype, dot)
    rows = []
    for trials in args.trials:
        for name in args.cases:
            workload = workloads.case(
                name, args.dtype, target=target, narrow_weights=args.narrow_weights
            )
            row = {
                "case": name,
                "dtype": args.dtype,
                "trials": trials,
                "peak_gops": peak,
                "peak_unit": peak_unit,
            }
            heron_strategy = None if args.search == "heron" else "evolutionary"
            row["default"], default_lib = _tune(workload, target, dot, trials, "metaschedule")
            row["heron"], heron_lib = _tune(workload, target, dot, trials, "heron", heron_strategy)
            gops = _retimed_gops(
                workload,
                {"default": default_lib, "heron": heron_lib},
                _library_calls(workload, target),
                lambda: unit_peak(target, args.dtype, dot, anew=True)[1],
            )
            row["peak_in_turn_gops"] = gops.pop("peak")
            for arm in ("default", "heron"):
                row[arm]["retimed_gops"] = gops.pop(arm)
            d, h = row["default"]["retimed_gops"], row["heron"]["retimed_gops"]
            row["ratio"] = h / d if d else None
            row["library_gops"] = gops
            rows.append(row)
            print(json.dumps(row), flush=True)
    _report(args, rows)


def _report(args, rows) -> None:
    peak_name = rows[0].get("peak_unit", "VNNI" if args.dtype == "int8" else "FMA")
    lines = [
        f"# ms_heron (HeronSpace + {args.search} search) vs MetaSchedule default ({args.dtype}, "
        "one run"
        + (f", compiled for {args.isa}" if args.isa else "")
        + (", 7-bit weights)" if args.narrow_weights else ")"),
        "",
        "GOPS: each arm's best record rebuilt and checked against numpy (int8: bit for bit, on "
        "random inputs and on u8 255 against s8 127 and -128, which a saturating kernel gets "
        "wrong; with 7-bit weights, on the widest pairs the byte multiply sums exactly); both "
        f"arms and the libraries then timed in turn, {TIMING_ROUNDS} rounds of 3 repeats of >= "
        f"100 ms, medians kept. % of peak: of the {peak_name} peak measured at the start of the "
        f"run, the fastest of its probe's bursts ({rows[0]['peak_gops']:.0f} GOPS); in turn: of "
        "the same probe measured anew (the fastest of its bursts) in each round of the timing, "
        "the median of the rounds kept (a shared host's speed drifts between the two moments). "
        "Libraries in the same run, operands fed as inputs. "
        "Search s/round: the strategy's own work per round of 32 (generating candidates and "
        "taking in results; build and measurement excluded).",
        "",
        "| case | trials | default valid | default GOPS | ms_heron valid | ms_heron GOPS | "
        "ms_heron / default | % of peak (default / ms_heron) | peak in turn | % of peak in turn "
        "(default / ms_heron) | ms_heron / ONNX Runtime | ms_heron / numpy | search s/round "
        "default | search s/round ms_heron |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, h = r["default"], r["heron"]
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "n/a"
        peaks = [r["peak_gops"], r.get("peak_in_turn_gops")]
        shares = [
            f"{d['retimed_gops'] / p:.0%} / {h['retimed_gops'] / p:.0%}" if p else "-"
            for p in peaks
        ]
        in_turn = f"{peaks[1]:.0f} GOPS" if peaks[1] else "-"
        libs = [
            f"{h['retimed_gops'] / r['library_gops'][k]:.2f}x" if k in r["library_gops"] else "-"
            for k in ("ONNX Runtime", "numpy")
        ]
        lines.append(
            f"| {r['case']} | {r['trials']} | {d['valid_share']:.0%} | {d['retimed_gops']:.0f} | "
            f"{h['valid_share']:.0%} | {h['retimed_gops']:.0f} | {ratio} | {shares[0]} | "
            f"{in_turn} | {shares[1]} | "
            f"{' | '.join(libs)} | {d['search_s_per_round']:.2f} | {h['search_s_per_round']:.2f} |"
        )
    for trials in args.trials:
        ratios = [r["ratio"] for r in rows if r["trials"] == trials and r["ratio"]]
        if ratios:
            lines += [
                "",
                f"Geometric mean ms_heron / default at {trials} trials: "
                f"**{results_io.geomean(ratios):.2f}x** ({len(ratios)} cases).",
            ]
    budgets = "_".join(str(t) for t in args.trials)
    subset = "_awkward" if args.cases == AWKWARD else ""
    isa = f"_{args.isa}" if args.isa else ""
    narrow = "_narrow" if args.narrow_weights else ""
    results_io.write(
        args.out,
        f"tuning_vs_default_{args.search}_{args.dtype}_{budgets}{subset}{isa}{narrow}",
        lines,
        rows,
    )


if __name__ == "__main__":
    main()
