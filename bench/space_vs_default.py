"""HeronSpace + MetaSchedule's evolutionary search vs MetaSchedule's default space, same run.

Per workload: share of measured candidates that built and ran, and the best GOPS in the
database after the same number of trials. Usage (from the repository root):

    .venv/bin/python bench/space_vs_default.py --trials 64 --dtype int8

Writes bench/results/space_vs_default.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

from ms_heron import HeronSpace, workloads
from ms_heron.targets import host_target
from ms_heron.tune import tune_workload

#: One representative Heron case per family, small enough for a 2-core machine.
CASES = ["gemm.G3", "bmm.B1", "gemv.V2", "c1d.C1", "c2d.C3", "c3d.C3", "dil.D3", "t2d.T1", "scan.S1"]
_FAILED_RUN = 1e9  # MetaSchedule stores failed candidates with run_secs of 1e10


def _summary(db, workload) -> dict:
    records = db.get_all_tuning_records()
    secs = [min(float(s) for s in r.run_secs) if r.run_secs else float("inf") for r in records]
    valid = [s for s in secs if s < _FAILED_RUN]
    best = min(valid) if valid else float("inf")
    return {
        "trials": len(records),
        "valid_share": len(valid) / len(records) if records else 0.0,
        "best_gops": workload.ops / best / 1e9 if valid else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--dtype", default="int8", choices=["int8", "fp32"])
    parser.add_argument("--cases", nargs="*", default=CASES)
    parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
    args = parser.parse_args()
    target = host_target()
    rows = []
    for name in args.cases:
        workload = workloads.case(name, args.dtype)
        row = {"case": name, "dtype": args.dtype}
        for label, space in (("default", "post-order-apply"), ("heron", HeronSpace())):
            with tempfile.TemporaryDirectory() as work_dir:
                start = time.perf_counter()
                db = tune_workload(workload, target, work_dir, args.trials, num_trials_per_iter=32, space=space, seed=0)
                row[label] = {**_summary(db, workload), "tuning_s": time.perf_counter() - start}
        row["ratio"] = row["heron"]["best_gops"] / row["default"]["best_gops"] if row["default"]["best_gops"] else None
        rows.append(row)
        print(json.dumps(row), flush=True)
    lines = [
        f"# HeronSpace vs MetaSchedule default space ({args.dtype}, {args.trials} trials, evolutionary search, one run)",
        "",
        "| case | default valid | default GOPS | HeronSpace valid | HeronSpace GOPS | HeronSpace / default |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, h = r["default"], r["heron"]
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "n/a"
        lines.append(
            f"| {r['case']} | {d['valid_share']:.0%} | {d['best_gops']:.0f} | {h['valid_share']:.0%} | {h['best_gops']:.0f} | {ratio} |"
        )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"space_vs_default_{args.dtype}_{args.trials}"
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    stem.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
