"""Two commits' kernels on one host: did a change make tuning find slower kernels?

Each commit tunes the same cases through its own ``ms-heron tune`` (from a ``git worktree`` of it,
seeds and round size alike), then this process rebuilds every run's best record, checks it against
numpy and times all of them in turn, with the peak measured in between. Why not compare two runs of
``tuning_vs_default.py``: on a shared 2-core VM the measured FMA peak moved 195-339 GOPS between
runs minutes apart, more than any change under test. Timed in turn, both commits' kernels see the
same machine; what is left is the search's own spread, which ``--seeds`` shows. Usage (repository
root, nothing else running):

    .venv/bin/python bench/commits_ab.py 2c6e984 HEAD --dtype fp32 int8 \
        --cases gemm.G1 c2d.C1 --trials 64

Writes bench/results/commits_ab_<base>_<head>_<trials>.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

import results_io
from tuning_vs_default import TIMING_ROUNDS

from ms_heron import workloads
from ms_heron.hardware.peak import unit_peak
from ms_heron.hardware.targets import host_target
from ms_heron.records import open_database
from ms_heron.report.baselines import medians_in_turn
from ms_heron.tuning import best_schedule
from ms_heron.workloads.evaluate import build, run_and_check, time_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
#: As ``tuning_vs_default.py`` tunes its arms.
ROUND_SIZE = 32


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def _tune(
    source: pathlib.Path, case: str, dtype: str, trials: int, seed: int, work_dir: pathlib.Path
) -> None:
    """``ms-heron tune`` of the checkout at ``source``, in a process of its own (its builder workers
    import that checkout's package, not this one)."""
    command = [
        sys.executable,
        "-m",
        "ms_heron.cli",
        "tune",
        case,
        "--dtype",
        dtype,
        "--trials",
        str(trials),
    ]
    command += ["--round-size", str(ROUND_SIZE), "--seed", str(seed), "--work-dir", str(work_dir)]
    done = subprocess.run(
        command,
        cwd=source,
        env={**os.environ, "PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{source.name}: {' '.join(command[2:])} failed:\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit before the change, e.g. 2c6e984")
    parser.add_argument(
        "head", nargs="?", default="HEAD", help="the commit with the change (default HEAD)"
    )
    parser.add_argument("--dtype", nargs="+", default=["fp32", "int8"], choices=["fp32", "int8"])
    parser.add_argument("--cases", nargs="+", default=["gemm.G1", "c2d.C1"])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0], help="one tuning per commit, case and seed"
    )
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    args = parser.parse_args()
    commits = [_git("rev-parse", "--short", c) for c in (args.base, args.head)]
    target = host_target()
    with tempfile.TemporaryDirectory(prefix="ms_heron_ab_") as tmp:
        root = pathlib.Path(tmp)
        sources = {c: root / f"src-{c}" for c in commits}
        try:
            for commit, source in sources.items():
                _git("worktree", "add", "--detach", str(source), commit)
            # (dtype, case, seed, commit) -> work dir; commits alternate so drift spreads over both
            runs = {}
            for dtype in args.dtype:
                for case in args.cases:
                    for seed in args.seeds:
                        for commit in commits:
                            work_dir = root / f"{dtype}-{case}-{seed}-{commit}"
                            print(f"tuning {case} {dtype} seed {seed} at {commit}", flush=True)
                            _tune(sources[commit], case, dtype, args.trials, seed, work_dir)
                            runs[dtype, case, seed, commit] = work_dir
            rows = _time(runs, args, commits, target)
        finally:
            for source in sources.values():
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(source)], cwd=REPO, check=False
                )
    _report(args, commits, rows)


def _time(runs: dict, args, commits: list[str], target) -> list[dict]:
    """Per dtype: every run's best kernel, checked, then all of them and the peak timed in turn."""
    rows = []
    for dtype in args.dtype:
        libs, cases = {}, {}
        for (d, case, seed, commit), work_dir in runs.items():
            if d != dtype:
                continue
            workload = cases.setdefault(case, workloads.case(case, dtype, target=target))
            lib = build(best_schedule(open_database(work_dir), workload, target).mod, target)
            run_and_check(lib, workload)
            libs[case, seed, commit] = lib
        samplers = {
            key: (lambda lib=lib, w=cases[key[0]]: time_lib(lib, w, repeat=3).seconds)
            for key, lib in libs.items()
        }
        samplers["peak"] = lambda dtype=dtype: 1 / unit_peak(target, dtype, anew=True)[1]
        seconds = medians_in_turn(samplers, TIMING_ROUNDS)
        peak_gops = 1 / seconds.pop("peak")
        for (case, seed, commit), secs in seconds.items():
            gops = cases[case].ops / secs / 1e9
            rows.append(
                {
                    "dtype": dtype,
                    "case": case,
                    "seed": seed,
                    "commit": commit,
                    "gops": gops,
                    "peak": peak_gops,
                }
            )
    return rows


def _report(args, commits: list[str], rows: list[dict]) -> None:
    base, head = commits
    lines = [
        f"# Kernels tuned at {base} and at {head}, timed in turn in one process ({args.trials} "
        "trials)",
        "",
        f"Each commit tuned each case with its own `ms-heron tune` (round size {ROUND_SIZE}, the "
        "seeds below); every run's best record was rebuilt with this checkout, checked against "
        f"numpy and timed with the others and the peak in turn ({TIMING_ROUNDS} rounds of 3 "
        "repeats of >= 100 ms, medians). Ratios > 1 mean the later commit's kernel is faster.",
        "",
        f"| dtype | case | seed | {base} GOPS | {head} GOPS | {head} / {base} "
        f"| % of peak ({base} / {head}) | peak GOPS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    gops = {(r["dtype"], r["case"], r["seed"], r["commit"]): r for r in rows}
    ratios = []
    for dtype in args.dtype:
        for case in args.cases:
            for seed in args.seeds:
                b, h = gops[dtype, case, seed, base], gops[dtype, case, seed, head]
                ratios.append(h["gops"] / b["gops"])
                lines.append(
                    f"| {dtype} | {case} | {seed} | {b['gops']:.0f} | {h['gops']:.0f} | "
                    f"{ratios[-1]:.2f}x | {b['gops'] / b['peak']:.0%} / "
                    f"{h['gops'] / h['peak']:.0%} | {b['peak']:.0f} |"
                )
    lines += [
        "",
        f"Geometric mean {head} / {base}: **{results_io.geomean(ratios):.2f}x** ({len(ratios)} "
        "runs each).",
    ]
    results_io.write(args.out, f"commits_ab_{base}_{head}_{args.trials}", lines, rows)


if __name__ == "__main__":
    main()
