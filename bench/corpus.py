"""Graphs users bring, each tuned for a short budget: does it import, lower, tune, compute what the
reference computes, and how fast is it against ONNX Runtime on the same file?

The corpus (``CORPUS``):
* ``torch.onnx`` exports of ``transformers`` model classes built from their configs (random weights,
  ``ms_heron.testing.exports``, published base sizes);
* the Caffe-era classics as opset-9 converters wrote them (``ms_heron.testing.classics``);
* int8 forms through ONNX Runtime's ``quantize_static`` (QDQ; 8-bit weights, and 7-bit with
  ``reduce_range``) and ``quantize_dynamic``.

Exporting needs torch and transformers (the ``corpus`` extra), which the tuning process does
without: ``--export DIR`` writes the exports (run it with an interpreter that has the extra), the
benchmark reads them from ``--exports DIR``. Each graph is tuned with ``TuningRun.tune`` (as
``ms-heron tune-model --time-budget`` does), its output checked (fp32: within 1e-4 of ONNX
Runtime's, relative to the output's range; int8: within one quantization step of the exact
reference, ``ms_heron.report.baselines.reference_outputs``, or no further from it than ONNX
Runtime's outputs), and the compiled model and ONNX Runtime are timed in turn in one fresh process.
Usage (repository root, nothing else running; the second line rewrites the tests' fixtures):

    /path/to/corpus-venv/bin/python bench/corpus.py --export exports
    /path/to/corpus-venv/bin/python bench/corpus.py --export tests/data/exports --size test
    .venv/bin/python bench/corpus.py --exports exports --budget 2m bert vit classic-alexnet

Adds each graph to bench/results/corpus_<budget>.json and rewrites corpus_<budget>.md from it.
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import subprocess
import sys
import tempfile

import models_vs_default
import numpy as np
import onnx
import results_io

from ms_heron.hardware.targets import host_cpu_model, host_target
from ms_heron.report.baselines import max_abs_diff, output_step, quantized
from ms_heron.testing import classics, models
from ms_heron.testing.models import OnnxModel

EXPORTED = (
    "bert",
    "distilbert",
    "gpt2",
    "llama",
    "vit",
    "swin",
    "convnext",
    "resnet",
    "mobilenetv2",
    "efficientnet",
    "whisper-encoder",
)
#: name -> how to get the graph: ("export", name), ("classic", name), or (quantizer, name of a graph
#: above; "-7bit": ONNX Runtime's ``reduce_range``, the 7-bit weights its guide suggests for CPUs
#: without VNNI).
CORPUS = {
    **{f"torch-{name}": ("export", name) for name in EXPORTED},
    **{f"classic-{name}": ("classic", name) for name in classics.CLASSICS},
    "torch-resnet-qdq": ("static", "torch-resnet"),
    "torch-resnet-qdq-7bit": ("static-7bit", "torch-resnet"),
    "classic-squeezenet-qdq": ("static", "classic-squeezenet"),
    "torch-bert-dynamic": ("dynamic", "torch-bert"),
}
PER_ROUND = 16
TIMING_ROUNDS = 5


def export_all(out: pathlib.Path, size: str) -> None:
    """Every export at ``size``, as ``<name>.onnx`` and ``<name>_inputs.npz`` in ``out`` (the test
    sizes are the suite's fixtures, ``tests/data/exports``)."""
    from ms_heron.testing.exports import EXPORTS  # pylint: disable=import-outside-toplevel

    out.mkdir(parents=True, exist_ok=True)
    for name in EXPORTED:
        model = EXPORTS[name](size)
        onnx.save(model.proto, out / f"{name}.onnx")
        np.savez(out / f"{name}_inputs.npz", **model.inputs)
        print(
            f"exported {name}: opset {model.proto.opset_import[0].version}, "
            f"{len(model.proto.graph.node)} nodes"
        )


def graph(name: str, exports: pathlib.Path) -> OnnxModel:
    """The corpus graph ``name`` (exports read from ``exports``)."""
    how, source = CORPUS[name]
    if how == "export":
        path = exports / f"{source}.onnx"
        if not path.is_file():
            sys.exit(
                f"corpus.py: no export {path}; write the exports first with --export {exports}"
            )
        return OnnxModel(source, onnx.load(path), dict(np.load(exports / f"{source}_inputs.npz")))
    if how == "classic":
        return classics.CLASSICS[source]()
    quantize = models.quantized_static if how.startswith("static") else models.quantized_dynamic
    return quantize(graph(source, exports), reduce_range=how.endswith("7bit"))


def _output_bound(
    model: OnnxModel, expected: list[np.ndarray], onnxruntime: list[np.ndarray]
) -> float:
    """How far the outputs may be from the reference: fp32 1e-4 of their range; int8 one
    quantization step of the graph's last ``DequantizeLinear`` (1e-3 of the range for dynamically
    quantized graphs, whose outputs are float), or as far as ONNX Runtime's own outputs are, if
    further. A deep int8 network moves that far when one activation rounds the other way in an early
    layer: on Zen 3 ONNX Runtime's fused kernels are 10.6 (about 11 steps, 1.0 on average) from the
    unfused QDQ ResNet-50 export, and 1.8% of the output range from dynamically quantized
    BERT-base."""
    scale = max(1.0, *(float(np.abs(e).max()) for e in expected))
    if not quantized(model.proto):
        return 1e-4 * scale
    step = output_step(model.proto) or 1e-3 * scale
    return max(step, max_abs_diff(onnxruntime, expected))


def tune_one(
    name: str, exports: pathlib.Path, budget_s: float, work_root: pathlib.Path, out: pathlib.Path
) -> dict:
    """Tune ``name`` for ``budget_s``, check its outputs, export the compiled model for timing."""
    # pylint: disable=import-outside-toplevel
    from ms_heron.relax import run_model
    from ms_heron.relax.passes import skipped_passes
    from ms_heron.report.baselines import onnxruntime_session, reference_outputs
    from ms_heron.tuning import RunSpec, TuningRun
    from ms_heron.tuning.budget import BUDGET_BOUND_TRIALS, deadline_after

    model = graph(name, exports)
    path = work_root / f"{name}.onnx"
    onnx.save(model.proto, path)
    onnx.save(model.proto, out / f"{name}.onnx")
    np.savez(out / f"{name}_inputs.npz", **model.inputs)
    run = TuningRun.create(
        work_root / name, RunSpec.of_model(path, model.input_shapes(), host_target(), seed=0)
    )
    state = run.tune(
        BUDGET_BOUND_TRIALS, deadline=deadline_after(budget_s), num_trials_per_iter=PER_ROUND
    )
    executable = run.compile()
    executable.export_library(str(out / f"{name}_ms_heron.so"))
    got = run_model(executable, model.inputs)
    expected = reference_outputs(model.proto, model.inputs)
    diff = max_abs_diff(got, expected)
    bound = _output_bound(
        model, expected, onnxruntime_session(model.proto, threads=1).run(None, model.inputs)
    )
    row = {
        "opset": model.proto.opset_import[0].version,
        "form": "int8" if quantized(model.proto) else "fp32",
        "nodes": len(model.proto.graph.node),
        "tasks": len(run.task_times()),
        "records": state.trials,
        "tuning s": state.elapsed_s,
        "max abs diff vs reference": diff,
        "allowed": bound,
        "correct": diff <= bound,
        "skipped rewrites": skipped_passes(run.lowered),
        "transpose kernels": sum(
            "transpose" in t.name and "conv" not in t.name and "matmul" not in t.name
            for t in run.task_times()
        ),
    }
    print(
        f"{name}: {state.trials} records in {state.elapsed_s:.0f} s; max abs diff {diff:.3g} "
        f"(allowed {bound:.3g})"
    )
    return row


def _markdown(data: dict, budget: str) -> list[str]:
    lines = [
        f"# The corpus: graphs users bring, {budget} of tuning each",
        "",
        "Each graph imported as its exporter wrote it, tuned by ms_heron under a wall-clock "
        "budget (set-up included; the tuned s column is the time it took), its output checked "
        "against the reference (fp32: ONNX Runtime, within 1e-4 of the output's range; int8: the "
        "exact reference, within one quantization step or as far as ONNX Runtime's fused kernels "
        "are from it), then the compiled model and ONNX Runtime (all graph optimizations, same "
        f"file) timed in turn in one fresh process ({TIMING_ROUNDS} rounds, medians). Ratios > 1 "
        "mean ms_heron is faster. Each row names the CPU and commit it ran on.",
        "",
        "| graph | form | opset | CPU | commit | tasks | tuned s | records | ms_heron ms | ONNX "
        "Runtime ms | vs ORT | max abs diff (allowed) | transpose kernels | rewrites skipped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in data.items():
        ours, ort = r["ms_heron ms"], r["ONNX Runtime ms"]
        lines.append(
            f"| {name} | {r['form']} | {r['opset']} | {r['cpu']} | {r['commit']} | {r['tasks']} | "
            f"{r['tuning s']:.0f} | {r['records']} | {ours:.2f} | {ort:.2f} | "
            f"**{ort / ours:.2f}x** | {r['max abs diff vs reference']:.2g} "
            f"({r['allowed']:.2g}{'*' if 'allowed note' in r else ''})"
            f"{'' if r['correct'] else ' WRONG'} | {r['transpose kernels']} | "
            f"{'; '.join(r['skipped rewrites']) or '-'} |"
        )
    lines += [
        f"\n\\* {name}: {r['allowed note']}" for name, r in data.items() if "allowed note" in r
    ]
    speed_up = results_io.geomean(r["ONNX Runtime ms"] / r["ms_heron ms"] for r in data.values())
    lines += [
        "",
        f"{len(data)} graphs, {sum(r['form'] == 'int8' for r in data.values())} int8, "
        f"{sum(r['correct'] for r in data.values())} correct. Geometric mean ms_heron / ONNX "
        f"Runtime: **{speed_up:.2f}x**.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "graphs",
        nargs="*",
        metavar="GRAPH",
        help=f"corpus graphs (default: all): {', '.join(CORPUS)}",
    )
    parser.add_argument(
        "--export", metavar="DIR", help="write the transformers exports to DIR and stop"
    )
    parser.add_argument(
        "--size", choices=("bench", "test"), default="bench", help="the exports' size (--export)"
    )
    parser.add_argument(
        "--exports", metavar="DIR", default="exports", help="where --export wrote them"
    )
    parser.add_argument(
        "--budget", default="2m", help="ms_heron's wall-clock tuning budget per graph"
    )
    parser.add_argument("--work-root", help="where the runs stay (default: a new temporary dir)")
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    # the fresh timing process
    parser.add_argument("--time-exported", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export:
        export_all(pathlib.Path(args.export), args.size)
        return
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    names = args.graphs or list(CORPUS)
    unknown = sorted(set(names) - set(CORPUS))
    if unknown:
        parser.error(f"no corpus graph {', '.join(unknown)}; the corpus: {', '.join(CORPUS)}")
    if args.time_exported:
        print(
            json.dumps(
                models_vs_default.time_exported(
                    pathlib.Path(args.time_exported), names, ("ms_heron",)
                )
            )
        )
        return
    from ms_heron.cli.common import parse_duration  # pylint: disable=import-outside-toplevel

    work_root = pathlib.Path(args.work_root or tempfile.mkdtemp(prefix="ms_heron_corpus_"))
    work_root.mkdir(parents=True, exist_ok=True)
    stem = f"corpus_{args.budget}"
    results = pathlib.Path(args.out) / f"{stem}.json"
    data = json.loads(results.read_text())["data"] if results.exists() else {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp)
            row = tune_one(
                name, pathlib.Path(args.exports), parse_duration(args.budget), work_root, out
            )
            timing = subprocess.run(
                [sys.executable, __file__, name, "--time-exported", str(out)],
                capture_output=True,
                text=True,
            )
            if timing.returncode:
                sys.exit(f"timing {name} failed:\n{timing.stderr[-3000:]}")
            times = json.loads(timing.stdout.strip().splitlines()[-1])[name]
        row.update(times, cpu=host_cpu_model(), commit=results_io.code_commit())
        data[name] = row
        results_io.write(args.out, stem, _markdown(data, args.budget), data)


if __name__ == "__main__":
    main()
