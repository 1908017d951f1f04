"""TVM's own operator suite (``te_workload.CONFIGS``, fp32): ms_heron vs MetaSchedule's default.

Per key and configuration, each arm tunes the TE-generated PrimFunc once for the largest trial count
(rounds of 64), and every smaller count is read from the same run: the best of its first ``n``
records, which is what a run stopped after ``n`` trials holds (the rounds are the same). Arms:
HeronSpace + HeronSearch, and MetaSchedule's post-order-apply space + evolutionary search.

The best kernel of every arm and count is then rebuilt, checked against the unscheduled kernel on
the same random inputs, and timed (median of 10 repeats of >= 100 ms) in one fresh process, so no
arm is timed in a process warmed or disturbed by tuning. Each key and configuration is one tuning
run (``ms_heron.tuning.run.TuningRun``: ms_heron in its work dir, the default arm in its
``baseline/``; ``ms-heron report`` and ``show`` read them), kept under ``--work-root``; a rerun with
the same root skips what is already tuned. Usage (repository root, nothing else
running):

    .venv/bin/python bench/te_suite.py --trials 64 200
    .venv/bin/python bench/te_suite.py --trials 16 --keys C1D SFM --configs 0

Writes bench/results/te_suite_<trials>[_config<configs>][_<keys>].{md,json}.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import subprocess
import sys
import tempfile

import results_io
from tvm import te
from tvm.s_tir.meta_schedule.testing.te_workload import CONFIGS

from ms_heron.hardware.peak import fma_peak_gops
from ms_heron.hardware.targets import host_target
from ms_heron.records import DATABASE_FILES, first_records
from ms_heron.tuning import RunSpec, TuningRun, best_schedule
from ms_heron.tuning.workdir import PROGRESS_FILE
from ms_heron.workloads import from_func
from ms_heron.workloads.evaluate import build, run_and_check, time_lib

#: Every key of the suite (C2D_WIN_NHWC, a Winograd variant with one configuration, left out).
KEYS = ["C1D", "C2D", "C3D", "GMM", "GRP", "DIL", "DEP", "T2D", "CAP", "NRM", "SFM", "CBR", "TBG"]
ARMS = ("ms_heron", "default")
ROUND = 64


def _func(key: str, config: int):
    return te.create_prim_func(CONFIGS[key][0](*CONFIGS[key][1][config]))


def _run(key: str, config: int, root: pathlib.Path, seed: int) -> TuningRun:
    """The run of one key and configuration: ms_heron in its work dir, MetaSchedule's default in
    baseline/."""
    workload = from_func(_func(key, config), f"{key}_{config}")
    return TuningRun.create(root / f"{key}_{config}", RunSpec.of(workload, host_target(), seed))


def _arm(run: TuningRun, arm: str) -> TuningRun:
    return run if arm == "ms_heron" else run.baseline()


def _tune(run: TuningRun, arm: str, trials: list[int]) -> None:
    """Tune one arm for max(trials); an arm killed before it got there starts again from nothing,
    so that its first n records are what an n-trial run holds."""
    arm_run = _arm(run, arm)
    if arm_run.state().trials >= max(trials):
        return
    for name in (*DATABASE_FILES, PROGRESS_FILE):
        (arm_run.work_dir / name).unlink(missing_ok=True)
    arm_run.tune(
        max(trials),
        search="heron" if arm == "ms_heron" else "metaschedule",
        num_trials_per_iter=ROUND,
    )


def _time_row(run: TuningRun, key: str, config: int, trials: list[int], peak_gops: float) -> dict:
    """Rebuild, check and time every arm's best kernel after each trial count (fresh process)."""
    workload, target = run.workload, run.target
    row = {
        "key": key,
        "config": config,
        "shape": list(CONFIGS[key][1][config]),
        "flops": workload.ops,
        "fma_peak_gops": peak_gops,
    }
    for arm in ARMS:
        arm_run = _arm(run, arm)
        secs, rounds = arm_run.seconds(), arm_run.progress()
        for n in trials:
            entry = {
                "tuning_s": next(r.elapsed_s for r in rounds if r.trials >= min(n, len(secs))),
                "valid_share": sum(s < math.inf for s in secs[:n]) / max(1, len(secs[:n])),
            }
            try:
                lib = build(
                    best_schedule(first_records(arm_run.work_dir, n), workload, target).mod, target
                )
                run_and_check(lib, workload)
                seconds = time_lib(lib, workload).seconds
                entry.update(
                    correct=True,
                    seconds=seconds,
                    peak_share=workload.ops / seconds / 1e9 / peak_gops,
                )
            except Exception as exc:  # pylint: disable=broad-except  # a row's failure is reported in its row
                entry.update(
                    correct=False,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                    seconds=math.inf,
                    peak_share=0.0,
                )
            row[f"{arm}@{n}"] = entry
    return row


def _ratios(rows, n) -> list[float]:
    return [r[f"default@{n}"]["seconds"] / r[f"ms_heron@{n}"]["seconds"] for r in rows]


def _peak_bound(rows, n) -> str:
    """How much faster than the default any program could be where the default is compute-bound:
    no kernel beats the measured FMA peak, so 1 / (the default's share of it) bounds the ratio."""
    shares = [r[f"default@{n}"]["peak_share"] for r in rows]
    # above 1: the FLOP estimate counts zeros (T2D)
    bound = [1 / s for s in shares if 0.5 <= s <= 1.0]
    if not bound:
        return "No row's default kernel runs at 50% or more of the FMA peak."
    return (
        f"Bound from the FMA peak: on {len(bound)} of {len(rows)} rows the default runs at 50-100% "
        "of it, so no program can be faster there than 1 / that share: "
        f"{results_io.geomean(bound):.2f}x on the geometric mean of those rows, "
        f"{min(bound):.2f}x-{max(bound):.2f}x each; {sum(b < 1.3 for b in bound)} of them cannot "
        "reach 1.3x."
    )


def _report(args, rows) -> None:
    lines = [
        "# TVM's te_workload suite (fp32): ms_heron (HeronSpace + HeronSearch) vs MetaSchedule "
        "default, one run",
        "",
        f"Machine: {host_target()}. Each arm tuned once for {max(args.trials)} trials in rounds of "
        f"{ROUND}; a smaller count is the best of the first n records of that run. Latency: best "
        "kernel rebuilt, checked against the unscheduled kernel (max error <= 1e-4 x max(1, max "
        "|output|)) and timed in a fresh process (median of 10 repeats of >= 100 ms). Ratio = "
        "default latency / ms_heron latency (> 1: ms_heron faster). % peak: the kernel's GFLOP/s "
        "as a share of the fp32 FMA peak measured in the same process "
        f"({rows[0]['fma_peak_gops']:.0f} GFLOP/s; memory-bound keys stay far below it). Tuning s: "
        "wall time until the round that reached n trials ended.",
        "",
    ]
    for n in args.trials:
        lines += [
            f"## {n} trials",
            "",
            "| key | config | default us | ms_heron us | ms_heron / default | % peak default / "
            "ms_heron | valid default / ms_heron | tuning s default / ms_heron | correct |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            d, h = r[f"default@{n}"], r[f"ms_heron@{n}"]
            ok = (
                "yes"
                if d["correct"] and h["correct"]
                else f"NO ({d.get('error') or h.get('error') or 'mismatch'})"
            )
            lines.append(
                f"| {r['key']} | {r['config']} | {d['seconds'] * 1e6:.1f} | "
                f"{h['seconds'] * 1e6:.1f} | {d['seconds'] / h['seconds']:.2f}x | "
                f"{d['peak_share']:.1%} / {h['peak_share']:.1%} | {d['valid_share']:.0%} / "
                f"{h['valid_share']:.0%} | {d['tuning_s']:.0f} / {h['tuning_s']:.0f} | {ok} |"
            )
        ratios = [x for x in _ratios(rows, n) if 0 < x < math.inf]
        geomean = results_io.geomean(ratios)
        lines += [
            "",
            f"Geometric mean ms_heron / default at {n} trials: **{geomean:.2f}x** "
            f"({sum(x >= 1.0 for x in ratios)} of {len(rows)} rows >= 1.0x).",
            "",
            _peak_bound(rows, n),
            "",
        ]
    stem = "te_suite_" + "_".join(map(str, args.trials))
    if args.configs != [0, 1]:
        stem += "_config" + "".join(map(str, args.configs))
    if args.keys != KEYS:  # a subset never overwrites a whole-suite result
        stem += "_" + "_".join(args.keys)
    results_io.write(args.out, stem, lines, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 200])
    parser.add_argument("--keys", nargs="+", choices=KEYS, default=KEYS)
    parser.add_argument("--configs", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--work-root", help="where the work dirs stay (default: a new temporary dir)"
    )
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    # the fresh timing process
    parser.add_argument("--time-rows", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.trials = sorted(args.trials)
    root = pathlib.Path(args.work_root or tempfile.mkdtemp(prefix="te_suite_"))
    # config 0 of every key first
    pairs = [(key, config) for config in args.configs for key in args.keys]
    if args.time_rows:
        peak = fma_peak_gops(host_target())
        rows = [
            _time_row(TuningRun.open(root / f"{key}_{config}"), key, config, args.trials, peak)
            for key, config in pairs
        ]
        pathlib.Path(args.time_rows).write_text(json.dumps(rows))
        return
    print(f"work dirs under {root}", flush=True)
    for key, config in pairs:
        run = _run(key, config, root, args.seed)
        for arm in ARMS:
            _tune(run, arm, args.trials)
            print(f"tuned {key}[{config}] {arm}", flush=True)
    rows_file = root / "timed.json"
    subprocess.run(
        [
            sys.executable,
            __file__,
            "--time-rows",
            str(rows_file),
            "--work-root",
            str(root),
            "--trials",
            *map(str, args.trials),
            "--keys",
            *args.keys,
            "--configs",
            *map(str, args.configs),
        ],
        check=True,
    )
    _report(args, json.loads(rows_file.read_text()))


if __name__ == "__main__":
    main()
