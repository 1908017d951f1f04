"""HeronSearch's population / generations / epsilon on real workloads: best GOPS and search time.

Heron's defaults (population 200, 5 generations, epsilon 0.6) were chosen for 1000-trial GPU runs;
this sweep is how ms_heron's defaults were picked for budgets of 64-200 trials on a 2-core CPU.
Usage (repository root): ``.venv/bin/python bench/search_params.py --trials 64 --cases gemm.G1
c2d.C3``. Writes bench/results/search_params_<trials>.{md,json}.
"""

from __future__ import annotations

import argparse
import json

import results_io
from tuning_vs_default import _tune

from ms_heron import HeronSearch, workloads
from ms_heron.hardware.targets import host_target

#: (population, generations, epsilon): Heron's defaults, ms_heron's, and neighbours of both.
CONFIGS = [(200, 5, 0.6), (64, 3, 0.4), (128, 3, 0.2), (32, 2, 0.4)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--dtype", default="int8", choices=["int8", "fp32"])
    parser.add_argument("--cases", nargs="*", default=["gemm.G1", "c2d.C3"])
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    args = parser.parse_args()
    target = host_target()
    rows = []
    for name in args.cases:
        workload = workloads.case(name, args.dtype, target=target)
        for population, generations, epsilon in CONFIGS:
            strategy = HeronSearch(population=population, generations=generations, epsilon=epsilon)
            got = _tune(workload, target, args.trials, "heron", strategy)
            rows.append(
                {
                    "case": name,
                    "population": population,
                    "generations": generations,
                    "epsilon": epsilon,
                    **got,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    lines = [
        f"# HeronSearch parameters ({args.dtype}, {args.trials} trials, rounds of 32, one run)",
        "",
        "| case | population | generations | epsilon | best GOPS (re-timed) | valid | search "
        "s/round |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['population']} | {r['generations']} | {r['epsilon']} | "
            f"{r['retimed_gops']:.0f} | {r['valid_share']:.0%} | {r['search_s_per_round']:.2f} |"
        )
    results_io.write(args.out, f"search_params_{args.dtype}_{args.trials}", lines, rows)


if __name__ == "__main__":
    main()
