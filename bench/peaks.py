"""The host's measured peaks, the ceilings every share-of-peak figure in these results is taken of:
each x86 dot product this CPU runs, fp32 FMA and memory bandwidth, on all cores and on one.

An int8 comparison with ONNX Runtime on a CPU without VNNI is a comparison of instructions as well
as of kernels: ONNX Runtime's u8 x s8 kernels multiply with ``vpmaddubsw`` (then ``vpmaddwd`` by
ones), which saturates pairs of products, where ms_heron's exact kernels multiply s16 with
``vpmaddwd`` unless the weights are narrow. This table states both forms' peaks, measured in the
same run, and the exact int8 peak over fp32's, so a ratio of whole networks can be read against what
the instructions allow. Usage (repository root, nothing else running):

    .venv/bin/python bench/peaks.py

Adds this CPU's row to bench/results/peaks.json and rewrites peaks.md from it.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import results_io

from ms_heron.hardware.dot_products import DOT_PRODUCTS, dot_product
from ms_heron.hardware.peak import dot_peak_gops, fma_peak_gops, memory_bandwidth_gbps
from ms_heron.hardware.targets import cpu_name, host_cpu_model, host_target, num_cores


def measure() -> dict:
    """Every peak this host runs, over all cores and over one."""
    row = {"llvm cpu": cpu_name(host_target()), "cores": num_cores(host_target()), "peaks": []}
    exact = dot_product(host_target())
    for cores in (row["cores"], 1):
        target = host_target(num_cores=cores)
        row["peaks"].append(
            {"unit": "fp32 FMA", "cores": cores, "GOPS": fma_peak_gops(target), "exact": True}
        )
        for dot in (d for d in DOT_PRODUCTS if d.runs_on(target)):
            row["peaks"].append(
                {
                    "unit": f"{dot.isa} {dot.form}",
                    "cores": cores,
                    "GOPS": dot_peak_gops(target, dot),
                    "exact": not dot.narrow_weights,
                    "ms_heron's exact int8": dot is exact,
                    # what fp32 kernels compiled for the same instruction set can reach
                    "fp32 FMA GOPS, same ISA": fma_peak_gops(dot.own_target(target)),
                }
            )
    row["memory GB/s"] = memory_bandwidth_gbps(host_target())
    return row


def _markdown(data: dict) -> list[str]:
    lines = [
        "# Measured peaks: the ceilings of every share-of-peak figure",
        "",
        "Each probe issues its unit's instruction on independent accumulators in registers, on "
        "every core (and on one), fastest of five bursts (`ms_heron.hardware.peak`). GOPS count a "
        "multiply and an add per product. `vpmaddubsw` (then `vpmaddwd` by ones) is exact only on "
        "narrow weights: it is the form ONNX Runtime's u8 x s8 kernels use on every weight on CPUs "
        "without VNNI, saturating. Each row was measured in one run on the CPU it names.",
        "",
        "Each dot product's probe is compiled for its own instruction set alone "
        "(`DotProduct.own_target`), and 'of fp32 FMA, same ISA' holds it against fp32 FMA compiled "
        "for that set too (an AVX2 kernel against AVX2 fp32 code). Rows without that figure were "
        "measured before: their probes were compiled for the host CPU, where LLVM fuses "
        "`vpmaddwd` and its `vpaddd` into AVX-512 VNNI's `vpdpwssd` on CPUs that have it (Zen 4, "
        "Zen 5), so their AVX2 and AVX-512BW `vpmaddwd` rows there are that fused instruction's.",
        "",
        "| CPU | commit | unit | cores | GOPS | of fp32 FMA | of fp32 FMA, same ISA "
        "| of ms_heron's exact int8 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cpu, row in data.items():
        for cores in sorted({p["cores"] for p in row["peaks"]}, reverse=True):
            peaks = [p for p in row["peaks"] if p["cores"] == cores]
            fma = next(p["GOPS"] for p in peaks if p["unit"] == "fp32 FMA")
            exact = next((p["GOPS"] for p in peaks if p.get("ms_heron's exact int8")), None)
            for p in peaks:
                mark = " (ms_heron's exact int8)" if p.get("ms_heron's exact int8") else ""
                mark += "" if p["exact"] else " (narrow weights only)"
                of_exact = f"{p['GOPS'] / exact:.2f}x" if exact and p["unit"] != "fp32 FMA" else "-"
                own_fma = p.get("fp32 FMA GOPS, same ISA")
                of_own_fma = f"{p['GOPS'] / own_fma:.2f}x ({own_fma:.0f})" if own_fma else "-"
                lines.append(
                    f"| {cpu} | {row['commit']} | {p['unit']}{mark} | {cores} | {p['GOPS']:.0f} "
                    f"| {p['GOPS'] / fma:.2f}x | {of_own_fma} | {of_exact} |"
                )
        lines.append(
            f"| {cpu} | {row['commit']} | memory read | {row['cores']} | {row['memory GB/s']:.1f} "
            "GB/s | | | |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    args = parser.parse_args()
    path = pathlib.Path(args.out) / "peaks.json"
    data = json.loads(path.read_text())["data"] if path.exists() else {}
    data[host_cpu_model()] = {**measure(), "commit": results_io.code_commit()}
    results_io.write(args.out, "peaks", _markdown(data), data)


if __name__ == "__main__":
    main()
