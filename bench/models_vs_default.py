"""Whole models: ms_heron vs MetaSchedule's default search at the same total trials, and vs ONNX
Runtime.

Each model is one ONNX graph (``ms_heron.testing.models``): both tuning arms import it through
Relax, and ONNX Runtime runs the same bytes. Per model and arm: tuning wall time, the compiled
model's latency and its largest output difference from ONNX Runtime; per fused task: each arm's best
kernel, the task's calls per model run, its share of the model's estimated latency, and which kind
of design space (Heron's or MetaSchedule's inside HeronSpace) ms_heron's best kernel came from. Each
model is one model run (``ms_heron.tuning.run.TuningRun``; the default arm in its ``baseline/``), so
a rerun with the same ``--work-root`` resumes. Tuning runs in this process; the compiled
models are exported and timed afterwards in one fresh process, together with ONNX Runtime, so that
no arm is timed in a process warmed (or disturbed) by tuning. Usage (repository root, nothing else
running):

    .venv/bin/python bench/models_vs_default.py --trials 192                      # all models
    .venv/bin/python bench/models_vs_default.py --models resnet --trials 96

Writes bench/results/models_vs_default_<trials>.{md,json} (``_<model>...`` appended for a subset).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import results_io

from ms_heron.hardware.targets import host_target, num_cores
from ms_heron.testing import models

ARMS = ("ms_heron", "MetaSchedule default")
#: Candidates per task round (MetaSchedule's num_trials_per_iter), as in the earlier result files.
PER_ROUND = 16
#: The fresh timing process times ONNX Runtime and both arms in turn this many times (medians kept):
#: re-timing the same compiled BERT pair in three fresh processes of 7 rounds gave 1.015x, 1.056x,
#: 1.047x.
TIMING_ROUNDS = 15


def _tune_and_export(
    name: str, trials: int, out: pathlib.Path, work_root: pathlib.Path, seed: int
) -> dict:
    """Both arms as one model run (ms_heron in the work dir, MetaSchedule's default in its
    baseline/)."""
    # pylint: disable-next=import-outside-toplevel
    from ms_heron.relax import compile_lowered
    from ms_heron.tuning import RunSpec, TuningRun  # pylint: disable=import-outside-toplevel

    model = models.ZOO[name]()
    work_root.mkdir(parents=True, exist_ok=True)
    onnx.save(model.proto, work_root / f"{name}.onnx")  # beside the run, which names it
    onnx.save(model.proto, out / f"{name}.onnx")
    np.savez(out / f"{name}_inputs.npz", **model.inputs)
    run = TuningRun.create(
        work_root / name,
        RunSpec.of_model(work_root / f"{name}.onnx", model.input_shapes(), host_target(), seed),
    )
    row = {"per task": {}}
    for arm, arm_run in zip(ARMS, (run, run.baseline())):
        arm_run.tune(
            trials,
            search="heron" if arm_run is run else "metaschedule",
            num_trials_per_iter=PER_ROUND,
        )
        row[f"{arm} tuning s"] = arm_run.state().elapsed_s
        times = arm_run.task_times()
        # MetaSchedule's own tuning: the kind of HeronSpace space does not apply
        if arm_run is not run:
            times = [dataclasses.replace(t, space="") for t in times]
        row["tasks"] = len(times)
        row["per task"][arm] = [dataclasses.asdict(t) for t in times]
        # the run's lowering: its exact math and Winograd forms
        compile_lowered(arm_run.database(), run.lowered, run.target).export_library(
            str(out / f"{name}_{arm.replace(' ', '_')}.so")
        )
    return row


def time_exported(
    out: pathlib.Path,
    names: list[str],
    arms=ARMS,
    rounds: int = TIMING_ROUNDS,
    also: dict | None = None,
) -> dict:
    """Fresh process: load each compiled model (``<name>_<arm>.so`` in ``out``), check it against
    ONNX Runtime, then time ONNX Runtime, the arms and ``also`` (more samplers by label, each
    returning seconds) in turn, ``rounds`` times, and keep each one's median. Two cores drift by 10%
    within a minute (a neighbour's load); timed one after the other, that drift would land on one of
    them."""
    import tvm  # pylint: disable=import-outside-toplevel

    from ms_heron.relax import run_model, time_model  # pylint: disable=import-outside-toplevel

    # pylint: disable-next=import-outside-toplevel
    from ms_heron.report.baselines import (
        max_abs_diff,
        median_seconds,
        medians_in_turn,
        onnxruntime_model,
        onnxruntime_session,
        output_step,
        quantized,
        reference_outputs,
    )

    threads = num_cores(host_target())
    rows = {}
    for name in names:
        inputs = dict(np.load(out / f"{name}_inputs.npz"))
        model = onnx.load(out / f"{name}.onnx")
        expected, _ = onnxruntime_model(model, inputs, threads)
        session = onnxruntime_session(model, threads)
        libs = {
            arm: tvm.runtime.load_module(str(out / f"{name}_{arm.replace(' ', '_')}.so"))
            for arm in arms
        }
        outputs = {arm: run_model(lib, inputs) for arm, lib in libs.items()}
        row = {f"{arm} max abs diff": max_abs_diff(got, expected) for arm, got in outputs.items()}
        # ONNX Runtime is not exact on every CPU: held against the exact reference too
        if quantized(model):
            reference = reference_outputs(model, inputs)
            row["output step"] = output_step(model)
            for who, got in {"ONNX Runtime": expected, **outputs}.items():
                row[f"{who} max abs diff vs reference"] = max_abs_diff(got, reference)
        samplers = {
            "ONNX Runtime": lambda: median_seconds(lambda: session.run(None, inputs)),
            **{arm: (lambda lib=lib: time_model(lib, inputs)) for arm, lib in libs.items()},
            **(also or {}),
        }
        for who, secs in medians_in_turn(samplers, rounds).items():
            row[f"{who} ms"] = secs * 1e3
        rows[name] = row
    return rows


def _task_ratio(task, others) -> float:
    """MetaSchedule default's best kernel over ms_heron's for ``task`` (> 1: ms_heron faster)."""
    theirs = next(t.seconds for t in others if t.name == task.name)
    return theirs / task.seconds if task.seconds > 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(models.ZOO), default=list(models.ZOO))
    parser.add_argument("--trials", type=int, default=192, help="total trials per model and arm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--work-root",
        help="where the model runs stay (default: a new temporary dir); a rerun resumes",
    )
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    # the fresh timing process
    parser.add_argument("--time-exported", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # per-round logs stay in the work dirs
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    if args.time_exported:
        print(json.dumps(time_exported(pathlib.Path(args.time_exported), args.models)))
        return

    work_root = pathlib.Path(args.work_root or tempfile.mkdtemp(prefix="ms_heron_models_"))
    print(f"model runs under {work_root} (ms-heron report / show work on them)", flush=True)
    with tempfile.TemporaryDirectory(prefix="ms_heron_models_") as tmp:
        out = pathlib.Path(tmp)
        tuned = {
            name: _tune_and_export(name, args.trials, out, work_root, args.seed)
            for name in args.models
        }
        timing = subprocess.run(
            [sys.executable, __file__, "--time-exported", tmp, "--models", *args.models],
            check=True,
            capture_output=True,
            text=True,
        )
        timed = json.loads(timing.stdout.strip().splitlines()[-1])
    data = {name: {**tuned[name], **timed[name]} for name in args.models}
    lines = [
        f"# Whole models, {args.trials} trials per arm, {num_cores(host_target())} cores",
        "",
        f"Latency of the compiled model (fresh process; ONNX Runtime and both arms timed in turn, "
        f"{TIMING_ROUNDS} rounds, medians). "
        "Ratios > 1 mean ms_heron is faster.",
        "",
        "| model | tasks | ms_heron ms | MS default ms | ONNX Runtime ms | ms_heron / MS default | "
        "ms_heron / ORT | tuning s (ms_heron / default) | max abs diff vs ORT (ms_heron / default) "
        "|",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in data.items():
        ours, default, ort = r["ms_heron ms"], r["MetaSchedule default ms"], r["ONNX Runtime ms"]
        lines.append(
            f"| {name} | {r['tasks']} | {ours:.3f} | {default:.3f} | {ort:.3f} | "
            f"**{default / ours:.2f}x** | **{ort / ours:.2f}x** | {r['ms_heron tuning s']:.0f} / "
            f"{r['MetaSchedule default tuning s']:.0f} | {r['ms_heron max abs diff']:.2g} / "
            f"{r['MetaSchedule default max abs diff']:.2g} |"
        )
    ratios = [r["MetaSchedule default ms"] / r["ms_heron ms"] for r in data.values()]
    lines += [
        "",
        f"Geometric mean ms_heron / MetaSchedule default: **{results_io.geomean(ratios):.2f}x** "
        f"({sum(x >= 1.0 for x in ratios)} of {len(ratios)} models >= 1.0x).",
    ]
    from ms_heron.relax import TaskTime
    from ms_heron.report import task_table, timing_note  # pylint: disable=import-outside-toplevel

    for name, r in data.items():
        arms = {arm: [TaskTime(**t) for t in times] for arm, times in r["per task"].items()}
        slowest = min(arms[ARMS[0]], key=lambda t: _task_ratio(t, arms[ARMS[1]]))
        lines += [
            "",
            f"## {name}: per task (kernel time: {timing_note(arms)}; share of the model estimate)",
            "",
            "Slowest ms_heron kernel against MetaSchedule default's for the same task: "
            f"{slowest.name}, {_task_ratio(slowest, arms[ARMS[1]]):.2f}x.",
            "",
            *task_table(arms),
        ]
    subset = "" if args.models == list(models.ZOO) else "_" + "_".join(args.models)
    results_io.write(args.out, f"models_vs_default_{args.trials}{subset}", lines, data)


if __name__ == "__main__":
    main()
