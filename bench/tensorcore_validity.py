"""TensorCore (WMMA) candidates on CUDA: Heron's constrained samples vs MetaSchedule's stock
``cuda-tensorcore`` space, same run. No GPU here: validity is checked as far as this machine can --
the space's postprocs (VerifyGPUCode among them), the build, and nvcc for the Target's arch; the
share of samples that pass all three (and contain ``wmma::mma_sync``) is reported per arm.

Heron samples come from the CP-SAT model of each design space; stock samples are the design
spaces replayed with fresh random decisions (what MetaSchedule's search starts from). To keep the
run short, the CUDA sources of one case are compiled by nvcc in batches (kernels renamed apart in
one translation unit); a failing batch is re-compiled kernel by kernel so each sample gets its own
verdict. Usage (repository root):

    .venv/bin/python bench/tensorcore_validity.py --samples 200

Writes bench/results/tensorcore_validity_<samples>.{md,json}.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time

import results_io
from tvm.s_tir import Schedule, Trace
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from ms_heron import HeronSpace, workloads
from ms_heron.constraints import Solver, derive, replay
from ms_heron.intrinsics import ensure_registered
from ms_heron.space import design_spaces_and_postprocs
from ms_heron.tuning.builder import build_cuda, cuda_source, require_nvcc

CASES = ["gemm.G1", "gemm.G3", "bmm.B1", "c2d.C1", "c1d.C1"]
TARGETS = ["nvidia/nvidia-h100", "nvidia/nvidia-a100"]
_KERNEL = 'extern "C" __global__'


def heron_schedules(workload, target, n):
    spaces, postprocs = design_spaces_and_postprocs(workload.func, target, HeronSpace())
    per_space = [(s, derive(s, target)) for s in spaces]
    samples = {
        i: Solver(m, seed=i).samples(-(-n // len(spaces))) for i, (_, m) in enumerate(per_space)
    }
    for k in range(n):
        index = k % len(spaces)
        space, model = per_space[index]
        values = samples[index][k // len(spaces) % len(samples[index])]
        yield (
            replay(model, space.trace.simplified(remove_postproc=True), workload.func, values),
            postprocs,
        )


def stock_schedules(workload, target, n):
    spaces, postprocs = design_spaces_and_postprocs(
        workload.func,
        target,
        ms.space_generator.PostOrderApply(
            sch_rules="cuda-tensorcore",
            postprocs="cuda-tensorcore",
            mutator_probs="cuda-tensorcore",
        ),
    )
    for k in range(n):
        sch = Schedule(workload.func, seed=k + 1, debug_mask="none")
        trace = spaces[k % len(spaces)].trace.simplified(remove_postproc=True)
        Trace(trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        yield sch, postprocs


def _nvcc(sources: list[str], arch: str) -> bool:
    """One nvcc run over ``sources`` (sharing their preamble) in one translation unit."""
    preamble = sources[0][: sources[0].index(_KERNEL)]
    if any(not s.startswith(preamble) for s in sources):
        return all(_nvcc([s], arch) for s in sources) if len(sources) > 1 else False
    body = "".join(
        re.sub(r"\b(main_kernel\w*)", rf"\1_s{i}", s[len(preamble) :])
        for i, s in enumerate(sources)
    )
    with tempfile.TemporaryDirectory() as tmp:
        src, out = f"{tmp}/batch.cu", f"{tmp}/batch.fatbin"
        with open(src, "w") as f:
            f.write(preamble + body)
        done = subprocess.run(
            ["nvcc", "--fatbin", "-O3", f"-arch={arch}", "-o", out, src],
            capture_output=True,
            check=False,
        )
    return done.returncode == 0


def nvcc_verdicts(sources: list[str], arch: str, batch: int = 25) -> list[bool]:
    verdicts = []
    for start in range(0, len(sources), batch):
        chunk = sources[start : start + batch]
        verdicts += [True] * len(chunk) if _nvcc(chunk, arch) else [_nvcc([s], arch) for s in chunk]
    return verdicts


def measure(schedules, target) -> dict:
    """Counts of samples passing each stage: postprocs (VerifyGPUCode), build, nvcc, with WMMA."""
    counts = {"samples": 0, "postprocs": 0, "built": 0, "nvcc": 0, "wmma": 0}
    sources = []
    for sch, postprocs in schedules:
        counts["samples"] += 1
        if not all(p.apply(sch) for p in postprocs):
            continue
        counts["postprocs"] += 1
        try:
            source = cuda_source(build_cuda(sch.mod, target))
        except Exception:  # pylint: disable=broad-except  (a candidate that fails to lower is a data point)
            continue
        counts["built"] += 1
        sources.append(source)
    verdicts = nvcc_verdicts(sources, str(target.attrs["arch"])) if sources else []
    counts["nvcc"] = sum(verdicts)
    counts["wmma"] = sum(ok and "wmma::mma_sync" in s for ok, s in zip(verdicts, sources))
    counts["valid_share"] = counts["wmma"] / max(1, counts["samples"])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--cases", nargs="+", default=CASES)
    parser.add_argument("--targets", nargs="+", default=TARGETS)
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    args = parser.parse_args()
    require_nvcc()
    ensure_registered()
    rows = []
    for tag in args.targets:
        target = Target(tag, host={"kind": "llvm"})
        for case in args.cases:
            workload = workloads.case(case, "fp16")
            for arm, sampler in (
                ("ms_heron", heron_schedules),
                ("stock cuda-tensorcore", stock_schedules),
            ):
                start = time.time()
                counts = measure(sampler(workload, target, args.samples), target)
                rows.append(
                    {
                        "target": tag,
                        "case": case,
                        "arm": arm,
                        **counts,
                        "seconds": round(time.time() - start, 1),
                    }
                )
                print(rows[-1], flush=True)
    lines = [
        "# TensorCore candidates: ms_heron constrained samples vs stock cuda-tensorcore "
        f"({args.samples} each)",
        "",
        "Compiled with nvcc here, never run (no GPU on this machine).",
        "",
        "| target | case | arm | pass postprocs (VerifyGPUCode) | built | nvcc | with "
        "wmma::mma_sync | valid share |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['target']} | {r['case']} | {r['arm']} | {r['postprocs']}/{r['samples']} | "
            f"{r['built']} | {r['nvcc']} | {r['wmma']} | {r['valid_share']:.0%} |"
            for r in rows
        ),
    ]
    results_io.write(args.out, f"tensorcore_validity_{args.samples}", lines, {"rows": rows})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
