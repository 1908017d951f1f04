"""Random programs from Heron's constrained space vs MetaSchedule's default space, same run.

Per workload: CP-SAT sampling throughput per design space, then the GOPS distribution (median,
p90, max) and the share of valid programs among N random samples of each space (a sample that
fails its postprocs, its build or its check counts as 0 GOPS). Usage (repository root):

    .venv/bin/python bench/constrained_sampling.py --samples 64

Writes bench/results/constrained_sampling.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import results_io
from tvm.s_tir import Schedule, Trace

from ms_heron import HeronSpace, workloads
from ms_heron.constraints import Solver, count_solutions, derive, replay, uniformity
from ms_heron.hardware.targets import host_target
from ms_heron.intrinsics import ensure_registered
from ms_heron.space import design_spaces, design_spaces_and_postprocs
from ms_heron.workloads.evaluate import build, run_and_check, time_lib

CASES = ["gemm.G1", "c2d.C3"]


def _gops(sch, workload, target) -> float:
    try:
        lib = build(sch.mod, target)
        run_and_check(lib, workload)
        return time_lib(lib, workload, repeat=3, min_repeat_ms=20).gops
    except Exception:  # pylint: disable=broad-except  (a broken random program is a data point)
        return 0.0


def _stats(values) -> dict:
    arr = np.asarray(values)
    return {
        "valid_share": float(np.mean(arr > 0)),
        "median_gops": float(np.median(arr)),
        "p90_gops": float(np.percentile(arr, 90)),
        "max_gops": float(arr.max()),
    }


def heron_samples(workload, target, n, rng):
    spaces, postprocs = design_spaces_and_postprocs(workload.func, target, HeronSpace())
    models = [derive(s, target) for s in spaces]
    solvers = [Solver(m, seed=i) for i, m in enumerate(models)]
    throughput = []
    for solver in solvers:
        start = time.perf_counter()
        solver.samples(200)
        throughput.append(200 / (time.perf_counter() - start))
    gops = []
    for k in range(n):
        i = k % len(spaces)
        values = solvers[i].sample()
        sch = replay(
            models[i], spaces[i].trace.simplified(remove_postproc=True), workload.func, values
        )
        gops.append(_gops(sch, workload, target) if all(p.apply(sch) for p in postprocs) else 0.0)
    return gops, throughput, [m.summary() for m in models]


def default_samples(workload, target, n, rng):
    spaces, postprocs = design_spaces_and_postprocs(workload.func, target, "post-order-apply")
    gops = []
    for _ in range(n):
        space = rng.choice(spaces)
        sch = Schedule(workload.func, seed=rng.randrange(1, 1 << 30))
        Trace(space.trace.simplified(remove_postproc=True).insts, {}).apply_to_schedule(
            sch, remove_postproc=True
        )
        gops.append(_gops(sch, workload, target) if all(p.apply(sch) for p in postprocs) else 0.0)
    return gops


def sampler_uniformity(target, draws: int = 300) -> dict:
    """How close CP-SAT's hinted sampling comes to uniform, on a space small enough to enumerate."""
    workload = workloads.make("gemm", "int8", target=target, M=64, N=64, K=64)
    space = design_spaces(workload.func, target, HeronSpace())[0]
    model = derive(space, target)
    feasible = count_solutions(model)
    solver = Solver(model, seed=0)
    samples = [solver.sample() for _ in range(draws)]
    return {
        "workload": workload.name,
        "feasible": feasible,
        "draws": draws,
        "uniformity": uniformity(samples, feasible),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--cases", nargs="*", default=CASES)
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    args = parser.parse_args()
    ensure_registered()
    target = host_target()
    rng = random.Random(0)
    rows = []
    for name in args.cases:
        workload = workloads.case(name, "int8", target=target)
        heron, throughput, summaries = heron_samples(workload, target, args.samples, rng)
        default = default_samples(workload, target, args.samples, rng)
        row = {
            "case": name,
            "heron": _stats(heron),
            "default": _stats(default),
            "solutions_per_s": [round(t) for t in throughput],
            "models": summaries,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    uni = sampler_uniformity(target)
    print(json.dumps(uni), flush=True)
    lines = [
        f"# {args.samples} random samples: Heron constrained space vs MetaSchedule default space "
        "(int8, one run)",
        "",
        "| case | space | valid | median GOPS | p90 GOPS | max GOPS | CP-SAT solutions/s per "
        "design space |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for label in ("heron", "default"):
            s = r[label]
            rate = ", ".join(map(str, r["solutions_per_s"])) if label == "heron" else "-"
            lines.append(
                f"| {r['case']} | {label} | {s['valid_share']:.0%} | {s['median_gops']:.0f} | "
                f"{s['p90_gops']:.0f} | {s['max_gops']:.0f} | {rate} |"
            )
    lines += [
        "",
        f"Sampler uniformity on {uni['workload']} (first design space, {uni['feasible']} feasible "
        f"programs): {uni['draws']} draws hit {uni['uniformity']:.2f}x the distinct programs "
        "uniform sampling would.",
    ]
    results_io.write(args.out, "constrained_sampling", lines, {"cases": rows, "uniformity": uni})


if __name__ == "__main__":
    main()
