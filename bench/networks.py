"""Whole networks under a wall-clock budget: ms_heron vs MetaSchedule's default search, and ONNX
Runtime.

One network per invocation (a ResNet-50 arm of 15 minutes plus compilation fits a session; a result
file gathers the networks). Each arm tunes the network's ONNX graph (``ms_heron.testing.models``)
through ``TuningRun.tune`` with a deadline, the way ``ms-heron tune-model --time-budget``
does, ms_heron in the run's work dir and MetaSchedule's default search in its ``baseline/``; the
compiled models are then timed with ONNX Runtime (all graph optimizations) on the same file in one
fresh process, in turn (medians). Per arm it also gives the tuner's model estimate (best kernel x
calls, summed over tasks) against the measured latency. Usage (repository root, nothing else
running). The third line times finished runs again, the fourth tunes a corpus graph
(``bench/corpus.py``), the fifth compiles for an AVX2 CPU and runs here, the next two race
ResNet-101 cold with the shipped cost model and warm from the ResNet-50 run of the first line,
and the last times an int8 run in turn with the fp32 run of the same network (is int8 worth
choosing on that CPU?):

    .venv/bin/python bench/networks.py resnet50 --budget 15m --work-root runs
    .venv/bin/python bench/networks.py mobilenetv2 --budget 15m --baseline-budget 15m
    .venv/bin/python bench/networks.py mobilenetv2 --work-root runs --retime
    .venv/bin/python bench/networks.py torch-vit --exports /tmp/exports --budget 15m
    .venv/bin/python bench/networks.py resnet50-int8 --isa avx2 --budget 15m
    .venv/bin/python bench/networks.py resnet101 --budget 5m --pretrained-model
    .venv/bin/python bench/networks.py resnet101 --budget 5m --records-from runs/resnet50
    .venv/bin/python bench/networks.py resnet50-int8 --isa avx2 --versus runs/resnet50

The race gives each arm's measured and estimated latency at 1, 2, 5 and 15 minutes of its budget.

Adds the network to bench/results/networks_<budget>.json and rewrites networks_<budget>.md from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import corpus
import models_vs_default
import numpy as np
import onnx
import results_io
from tvm.target import Target

from ms_heron.hardware.dot_products import dot_product
from ms_heron.hardware.targets import (
    ISA_MCPU,
    TargetError,
    cpu_name,
    host_cpu_model,
    host_target,
    narrowed,
    num_cores,
)
from ms_heron.testing import models
from ms_heron.tuning.workdir import RUN_FILE

#: fp32 as exported; int8 as ONNX Runtime's tools quantize them (QDQ for ResNet-50, dynamic for
#: BERT-base), with 8-bit weights and with ``reduce_range``'s 7-bit ones.
NETWORKS = (
    "resnet50",
    "resnet101",
    "mobilenetv2",
    "bert-base",
    "bert-large",
    "resnet50-int8",
    "bert-base-int8",
    "resnet50-int8-7bit",
    "bert-base-int8-7bit",
)
ARMS = ("ms_heron", "MetaSchedule default")
#: Candidates per task round, as ``ms-heron tune-model`` measures them.
PER_ROUND = 16
TIMING_ROUNDS = 7
#: The race, at the times a user waits: each arm's database as it stood at these minutes of its
#: tuning (those inside its budget), and at its end, is compiled and timed with the rest, beside the
#: tuner's estimate at the same moment. A point is the state of the budgeted run at that moment, not
#: what a run given that budget would find (the task scheduler spends a shorter budget otherwise).
#: A task not yet tuned at a point runs the program HeronSearch would measure first in ms_heron's
#: model (``TuningRun.compile``), and TVM's untuned kernel in MetaSchedule default's.
RACE_MINUTES = (1, 2, 5, 15)
#: The label of each arm's estimate taken again in the timing process, in turn with the models: the
#: tuner's estimate sums records measured minutes apart, and a shared host's speed drifts between
#: them.
RETIMED = "estimate retimed"
#: The label (and file stem) of the finished run ``--versus`` times in turn with the arms.
VERSUS = "versus"


def _file_key(key: str) -> str:
    """A result row's key in a file name: ``resnet101 (avx2, znver3, warm: resnet50)`` ->
    ``resnet101_avx2_znver3_warm_resnet50``."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", key).strip("_")


def _network(name: str, exports: pathlib.Path | None) -> models.OnnxModel:
    """The zoo network or corpus graph ``name``."""
    return models.ZOO[name]() if name in models.ZOO else corpus.graph(name, exports)


def _label(arm: str, minutes: float | None) -> str:
    return arm if minutes is None else f"{arm} at {minutes:g}m"


def _race_points(arm: str, arm_run, minutes=RACE_MINUTES) -> list[dict]:
    """At each of ``minutes`` inside the arm's tuning time, and at its end (``minutes`` None), the
    last round that ended by then: its elapsed time, records and the tuner's model estimate (inf
    until every task had a valid kernel), and the label its compiled model is timed under."""
    rows = arm_run.progress()
    end_s = rows[-1].elapsed_s
    points = []
    for at in [*(m for m in minutes if 60 * m < end_s), None]:
        done = [r for r in rows if r.elapsed_s <= (end_s if at is None else 60 * at) + 1e-6]
        if done:
            points.append(
                {
                    "label": _label(arm, at),
                    "minutes": at,
                    "elapsed s": done[-1].elapsed_s,
                    "records": done[-1].trials,
                    "estimate ms": done[-1].best_seconds * 1e3,
                }
            )
    return points


def _export_task_kernels(run, database, out: pathlib.Path, arm: str) -> list[dict]:
    """Each task's best kernel in ``database``, built as the tuner's builder builds it and exported
    with its call count and arguments, so that the timing process can take the tuner's estimate
    again (calls x cold time, summed) in turn with the compiled models."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from ms_heron.tuning import NoValidRecord, best_schedule
    from ms_heron.tuning.builder import build_candidate

    kernels = []
    for i, task in enumerate(run.tasks):
        try:
            sch = best_schedule(database, task.mod["main"], run.target)
        # every candidate failed: the model runs this task untuned, the estimate is inf
        except NoValidRecord:
            kernels.append({"file": None, "calls": task.weight, "args": []})
            continue
        path = out / f"{arm.replace(' ', '_')}_task{i}.so"
        build_candidate(sch.mod, run.target, None).export_library(str(path))
        args = [a.as_json() for a in ArgInfo.from_entry_func(sch.mod, remove_preproc=True)]
        kernels.append({"file": path.name, "calls": task.weight, "args": args})
    return kernels


def _estimate_sampler(out: pathlib.Path, kernels: list[dict]):
    """The estimate taken now: each task's exported kernel timed cold, as the runner times
    candidates."""
    import tvm  # pylint: disable=import-outside-toplevel

    from ms_heron.tuning.measure import cold_seconds  # pylint: disable=import-outside-toplevel

    if any(k["file"] is None for k in kernels):  # a task without a tuned kernel
        return lambda: math.inf
    loaded = [
        (k["calls"], tvm.runtime.load_module(str(out / k["file"])), k["args"]) for k in kernels
    ]
    return lambda: sum(calls * cold_seconds(lib, args) for calls, lib, args in loaded)


@dataclasses.dataclass(kw_only=True)
class Setup:
    """How one invocation tunes a network: the arms' budgets, where the runs stay, and ms_heron's
    start (the pretrained cost model, records of other runs).

    Parameters
    ----------
    budgets
        Seconds per arm (:data:`ARMS`).
    work_root
        Where the runs stay.
    retime
        Time the runs under ``work_root`` as they stand.
    baseline_from
        An earlier work root whose MetaSchedule default run is taken instead of tuning it.
    exports
        Where ``bench/corpus.py --export`` wrote the corpus graphs.
    target
        Compile for this target (the host's when None).
    pretrained_model
        ms_heron's search starts from the shipped cost model.
    records_from
        Work dirs or stores that seed ms_heron's run (a warm start); MetaSchedule's default has no
        such start and tunes cold.
    versus
        A finished run's work dir (ms_heron's fp32 of the same network, say) whose compiled model
        is timed in turn with the arms, so that the row compares the two in one process.
    """

    budgets: dict[str, float]
    work_root: pathlib.Path
    seed: int = 0
    retime: bool = False
    baseline_from: pathlib.Path | None = None
    exports: pathlib.Path | None = None
    target: Target | None = None
    pretrained_model: bool = False
    records_from: tuple[pathlib.Path, ...] = ()
    versus: pathlib.Path | None = None


def _export_versus(work_dir: pathlib.Path, exports, out: pathlib.Path) -> str:
    """The finished run in ``work_dir`` compiled (its network's inputs beside it) for the timing
    process; its network's name."""
    # pylint: disable-next=import-outside-toplevel
    from ms_heron.tuning import TuningRun

    other = TuningRun.open(work_dir)
    other.compile(other.chosen_database()).export_library(str(out / f"{VERSUS}.so"))
    np.savez(out / f"{VERSUS}_inputs.npz", **_network(work_dir.name, exports).inputs)
    return work_dir.name


def _check_versus(parser: argparse.ArgumentParser, work_dir: pathlib.Path, target: Target) -> None:
    """Before any tuning: ``--versus`` names a finished run of this target (the comparison is of
    one CPU's code) whose network this benchmark can build inputs for."""
    # pylint: disable-next=import-outside-toplevel
    from ms_heron.tuning import TuningRun

    if not (work_dir / RUN_FILE).is_file():
        parser.error(f"--versus: {work_dir} holds no ms_heron run (a work dir, e.g. runs/resnet50)")
    if work_dir.name not in [*NETWORKS, *corpus.CORPUS]:
        parser.error(f"--versus: {work_dir} is a run of no network this benchmark knows")
    tuned_for = TuningRun.open(work_dir).target
    if str(tuned_for) != str(target):
        parser.error(
            f"--versus: {work_dir} was tuned for {tuned_for}, this run tunes for {target}; give a "
            "run of the same --isa on this CPU"
        )


def _versus_sampler(out: pathlib.Path) -> dict:
    """``{VERSUS: seconds of one call}`` where the tuning process exported a ``--versus`` run."""
    if not (out / f"{VERSUS}.so").exists():
        return {}
    import tvm  # pylint: disable=import-outside-toplevel

    from ms_heron.relax import time_model  # pylint: disable=import-outside-toplevel

    lib = tvm.runtime.load_module(str(out / f"{VERSUS}.so"))
    inputs = dict(np.load(out / f"{VERSUS}_inputs.npz"))
    return {VERSUS: lambda: time_model(lib, inputs)}


def _tune_and_export(name: str, setup: Setup, out: pathlib.Path) -> tuple[dict, dict]:
    """Both arms tuned (or, ``setup.retime``, as they stand; the baseline copied from
    ``setup.baseline_from``'s finished run), their models at the race points compiled and exported
    to ``out``; the result row and, per arm, its final tasks' exported kernels."""
    # pylint: disable=import-outside-toplevel
    from ms_heron.records import first_records
    from ms_heron.tuning import RunSpec, TuningRun
    from ms_heron.tuning.budget import BUDGET_BOUND_TRIALS, deadline_after

    work_root = setup.work_root
    model = _network(name, setup.exports)
    work_root.mkdir(parents=True, exist_ok=True)
    onnx.save(model.proto, work_root / f"{name}.onnx")
    onnx.save(model.proto, out / f"{name}.onnx")
    np.savez(out / f"{name}_inputs.npz", **model.inputs)
    spec = RunSpec.of_model(
        work_root / f"{name}.onnx",
        model.input_shapes(),
        setup.target or host_target(),
        setup.seed,
    )
    if setup.baseline_from is not None:
        # the balance the reused baseline was lowered with picks the same Winograd forms, so both
        # arms have the same tasks (this process may measure another)
        balance = TuningRun.open(setup.baseline_from / name).spec.flops_per_byte
        spec = dataclasses.replace(spec, flops_per_byte=balance)
    run = TuningRun.create(work_root / name, spec)
    if setup.baseline_from is not None:
        shutil.copytree(
            setup.baseline_from / name / "baseline",
            work_root / name / "baseline",
            dirs_exist_ok=True,
        )
    row = {"per task": {}, "race": {}, "curve": {}}
    kernels = {}
    for arm, arm_run in zip(ARMS, (run, run.baseline())):
        ours = arm_run is run
        as_it_stands = setup.retime or (setup.baseline_from is not None and not ours)
        # perhaps tuned by an earlier ms_heron, which did not time its best kernels again
        if as_it_stands:
            arm_run.confirm()
        state = (
            arm_run.progress()[-1]
            if as_it_stands
            else arm_run.tune(
                BUDGET_BOUND_TRIALS,
                search="heron" if ours else "metaschedule",
                deadline=deadline_after(setup.budgets[arm]),
                num_trials_per_iter=PER_ROUND,
                say=lambda line, arm=arm: print(f"{name} {arm}: {line}", flush=True),
                records_from=setup.records_from if ours else (),
                pretrained_model=setup.pretrained_model and ours,
            )
        )
        times = arm_run.task_times()
        if not ours:
            times = [dataclasses.replace(t, space="") for t in times]
        row.update(
            {
                f"{arm} tuning s": state.elapsed_s,
                f"{arm} records": state.trials,
                "tasks": len(times),
                f"{arm} estimate ms": sum(t.calls * t.seconds for t in times) * 1e3,
            }
        )
        row["per task"][arm] = [dataclasses.asdict(t) for t in times]
        print(
            f"{name} {arm}: {state.trials} records in {state.elapsed_s:.0f} s, estimate "
            f"{row[f'{arm} estimate ms']:.2f} ms",
            flush=True,
        )
        row["race"][arm] = _race_points(arm, arm_run)
        row["curve"][arm] = [
            (p.elapsed_s, p.best_seconds * 1e3)
            for p in arm_run.progress()
            if p.best_seconds < float("inf")
        ]
        for point in row["race"][arm]:
            database = (
                arm_run.chosen_database()
                if point["minutes"] is None
                else first_records(arm_run.work_dir, point["records"])
            )
            # MetaSchedule's untuned tasks run TVM's kernels, as its own compilation runs them
            run.compile(database, untuned="analytical" if ours else "naive").export_library(
                str(out / f"{name}_{point['label'].replace(' ', '_')}.so")
            )
        kernels[arm] = _export_task_kernels(run, arm_run.chosen_database(), out, arm)
    if setup.versus is not None:
        row[VERSUS] = _export_versus(setup.versus, setup.exports, out)
    return row, kernels


def _plot(name: str, r: dict, path: pathlib.Path) -> None:
    """The race: each arm's estimated latency over its tuning time (line) and the measured latency
    of its database at the race points (markers), ONNX Runtime's latency as a horizontal line."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, color in zip(ARMS, ("tab:blue", "tab:orange")):
        if r["curve"].get(arm):
            xs, ys = zip(*r["curve"][arm])
            ax.plot(xs, ys, color=color, linestyle="--", label=f"{arm}: estimate")
        points = [p for p in r["race"].get(arm, []) if f"{p['label']} ms" in r]
        ax.plot(
            [p["elapsed s"] for p in points],
            [r[f"{p['label']} ms"] for p in points],
            "o-",
            color=color,
            label=f"{arm}: measured",
        )
    ax.axhline(r["ONNX Runtime ms"], color="black", linewidth=1, label="ONNX Runtime")
    ax.set(
        xlabel="tuning time (s)",
        ylabel="model latency (ms)",
        title=f"{name}: the race",
        yscale="log",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _retimed_ratios(r: dict) -> str:
    """Each arm's retimed estimate over its measured latency ("-" for rows timed before it
    existed)."""
    if f"{ARMS[0]} {RETIMED} ms" not in r:
        return "-"
    return " / ".join(f"{r[f'{arm} {RETIMED} ms'] / r[f'{arm} ms']:.2f}" for arm in ARMS)


def _reference_distance(r: dict) -> str:
    """How far ms_heron's and ONNX Runtime's outputs are from the exact reference: in quantization
    steps of the output, or absolute where the graph has none (dynamically quantized); "-" for float
    networks and rows timed before the check existed."""
    whose = (ARMS[0], "ONNX Runtime")
    if f"{ARMS[0]} max abs diff vs reference" not in r:
        return "-"
    if not r.get("output step"):
        return (
            " / ".join(f"{r[f'{who} max abs diff vs reference']:.2g}" for who in whose)
            + " (absolute)"
        )
    return (
        " / ".join(
            f"{r[f'{who} max abs diff vs reference'] / r['output step']:.1f}" for who in whose
        )
        + " steps"
    )


def _markdown(data: dict, budget: str) -> list[str]:
    from ms_heron.relax import TaskTime
    from ms_heron.report import task_table, timing_note  # pylint: disable=import-outside-toplevel

    lines = [
        f"# Whole networks, {budget} of tuning per arm, {num_cores(host_target())} cores",
        "",
        "Each arm tuned under a wall-clock budget (set-up included), then the compiled models and "
        "ONNX Runtime (all graph optimizations, same ONNX file) timed in turn in one fresh "
        f"process ({TIMING_ROUNDS} rounds, medians). Ratios > 1 mean ms_heron is faster. The "
        "estimate is the tuner's: best kernel x calls, summed over tasks; where a per-task table "
        "says 'timed again after tuning', each task's fastest records were timed once more when "
        "its arm's tuning ended, and the model runs, and the estimate sums, the fastest of them "
        "by those times (`ms_heron.tuning.confirm`: the fastest of many noisy timings is biased "
        "fast). The machine changes between sessions: each row names the CPU it was measured on, "
        "and its ratios compare arms on that CPU only. The retimed estimate is the same sum with "
        "every task's best kernel timed again as the tuner times it (cold weights), in the timing "
        "process, in turn with the models: a shared host's speed drifts between the moments the "
        "tuner's records were taken and the timing.",
        "",
        "| network | CPU | commit | tasks | ms_heron ms | MS default ms | ONNX Runtime ms | vs MS "
        "default | vs ORT | records (ms_heron / default) | estimate / measured (ms_heron / "
        "default) | retimed estimate / measured (ms_heron / default) | max abs diff vs ORT | int8: "
        "max abs diff vs exact reference (ms_heron / ORT) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in data.items():
        ours, default, ort = r["ms_heron ms"], r["MetaSchedule default ms"], r["ONNX Runtime ms"]
        commit = r["commit"] + (f" (timed at {r['timed at']})" if "timed at" in r else "")
        commit += " (MS default's run reused)" if r.get("baseline reused") else ""
        cpu = f"{r['cpu']}, compiled for {r['isa']}" if "isa" in r else r["cpu"]
        lines.append(
            f"| {name} | {cpu} | {commit} | {r['tasks']} | {ours:.2f} | {default:.2f} | {ort:.2f} "
            f"| **{default / ours:.2f}x** | **{ort / ours:.2f}x** | {r['ms_heron records']} / "
            f"{r['MetaSchedule default records']} | {r['ms_heron estimate ms'] / ours:.2f} / "
            f"{r['MetaSchedule default estimate ms'] / default:.2f} | {_retimed_ratios(r)} | "
            f"{r['ms_heron max abs diff']:.2g} | {_reference_distance(r)} |"
        )
    ratios = [r["MetaSchedule default ms"] / r["ms_heron ms"] for r in data.values()]
    vs_ort = results_io.geomean(r["ONNX Runtime ms"] / r["ms_heron ms"] for r in data.values())
    lines += [
        "",
        f"Geometric mean ms_heron / MetaSchedule default: **{results_io.geomean(ratios):.2f}x**; "
        f"ms_heron / ONNX Runtime: **{vs_ort:.2f}x**.",
    ]
    versus = {name: r for name, r in data.items() if VERSUS in r}
    if versus:
        lines += ["", "Timed in turn with another finished run of ms_heron (`--versus`):", ""]
        lines += [
            f"- {name}: {r['ms_heron ms']:.2f} ms against {r[VERSUS]}'s {r[f'{VERSUS} ms']:.2f} "
            f"ms, **{r[f'{VERSUS} ms'] / r['ms_heron ms']:.2f}x**"
            for name, r in versus.items()
        ]
    for name, r in data.items():
        if r.get("race"):
            lines += [
                "",
                f"## {name}: the race (plotted in `*_{_file_key(name)}_race.png` beside this file)",
                "",
                "| arm, point | tuning time s | records | estimate ms | measured ms | estimate / "
                "measured |",
                "|---|---|---|---|---|---|",
            ]
            for points in r["race"].values():
                for p in points:
                    measured = r.get(f"{p['label']} ms", math.nan)
                    lines.append(
                        f"| {p['label']} | {p['elapsed s']:.0f} | {p['records']} "
                        f"| {p['estimate ms']:.2f} | {measured:.2f} "
                        f"| {p['estimate ms'] / measured:.2f} |"
                    )
    for name, r in data.items():
        arms = {arm: [TaskTime(**t) for t in times] for arm, times in r["per task"].items()}
        lines += [
            "",
            f"## {name}: per task (kernel time: {timing_note(arms)}; share of the model estimate)",
            "",
            *task_table(arms),
        ]
    return lines


def _row_key(args: argparse.Namespace) -> str:
    """The result row's name: the network, the host (every row is kept per host, a Zen 3's beside
    an Emerald Rapids'), and what sets the run apart from a cold native one: ``resnet101 (avx2,
    znver3, pretrained model, warm: resnet50)``."""
    tags = [", ".join(filter(None, [args.isa, cpu_name(host_target())]))]
    if args.pretrained_model:
        tags.append("pretrained model")
    if args.records_from:
        tags.append("warm: " + ", ".join(pathlib.Path(d).name for d in args.records_from))
    return f"{args.network} ({', '.join(tags)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "network", choices=[*NETWORKS, *corpus.CORPUS], help="a zoo network or a corpus graph"
    )
    parser.add_argument(
        "--exports", default="exports", help="where bench/corpus.py --export wrote the exports"
    )
    parser.add_argument(
        "--budget", default="15m", help="ms_heron's wall-clock tuning budget (default 15m)"
    )
    parser.add_argument(
        "--baseline-budget", help="MetaSchedule default's budget (default: the same)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--work-root",
        help="where the runs stay (default: a new temporary dir); ms-heron report works on them",
    )
    parser.add_argument(
        "--retime",
        action="store_true",
        help="time the runs already under --work-root again without tuning (when the machine was "
        "disturbed)",
    )
    parser.add_argument(
        "--baseline-from",
        metavar="WORK_ROOT",
        help="take MetaSchedule default's finished run from this earlier --work-root instead of "
        "tuning it again (its code is TVM's, unchanged by ms_heron's commits); it is timed "
        "afresh with the others",
    )
    parser.add_argument(
        "--isa",
        choices=sorted(ISA_MCPU),
        help="compile for this instruction set, narrower than the host's (the row names it); ONNX "
        "Runtime keeps the host's",
    )
    parser.add_argument(
        "--pretrained-model",
        action="store_true",
        help="ms_heron starts from the shipped cost model (the row names it)",
    )
    parser.add_argument(
        "--records-from",
        metavar="WORK_DIR",
        action="append",
        default=[],
        help="a warm start: seed ms_heron's run from this earlier run's work dir or a records "
        "store, repeatable (the row names them); MetaSchedule's default tunes cold",
    )
    parser.add_argument(
        "--versus",
        metavar="WORK_DIR",
        help="time this finished run (ms_heron's fp32 of the same network, tuned for the same "
        "--isa, say) in turn with the arms; the file gives the ratio",
    )
    parser.add_argument("--out", default=str(results_io.DEFAULT_DIR))
    # the fresh timing process
    parser.add_argument("--time-exported", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    if args.time_exported:
        out = pathlib.Path(args.time_exported)
        labels = json.loads((out / "labels.json").read_text())
        kernels = json.loads((out / "kernels.json").read_text())
        also = {f"{arm} {RETIMED}": _estimate_sampler(out, k) for arm, k in kernels.items()}
        also.update(_versus_sampler(out))
        print(
            json.dumps(
                models_vs_default.time_exported(out, [args.network], labels, TIMING_ROUNDS, also)
            )
        )
        return
    from ms_heron.cli.common import parse_duration  # pylint: disable=import-outside-toplevel

    budgets = {
        ARMS[0]: parse_duration(args.budget),
        ARMS[1]: parse_duration(args.baseline_budget or args.budget),
    }
    if args.retime and not (
        args.work_root and (pathlib.Path(args.work_root) / args.network).is_dir()
    ):
        parser.error(f"--retime needs --work-root holding a finished {args.network} run")
    try:
        target = narrowed(host_target(), args.isa) if args.isa else host_target()
    except TargetError as err:
        parser.error(str(err))
    missing = [d for d in args.records_from if not pathlib.Path(d).is_dir()]
    if missing:
        parser.error(f"--records-from: no such directory: {', '.join(missing)}")
    if args.versus:
        _check_versus(parser, pathlib.Path(args.versus), target)
    key = _row_key(args)
    setup = Setup(
        budgets=budgets,
        work_root=pathlib.Path(args.work_root or tempfile.mkdtemp(prefix="ms_heron_networks_")),
        seed=args.seed,
        retime=args.retime,
        baseline_from=pathlib.Path(args.baseline_from) if args.baseline_from else None,
        exports=pathlib.Path(args.exports),
        target=target,
        pretrained_model=args.pretrained_model,
        records_from=tuple(pathlib.Path(d) for d in args.records_from),
        versus=pathlib.Path(args.versus) if args.versus else None,
    )
    print(f"runs under {setup.work_root}", flush=True)
    commit = results_io.code_commit()
    # which commit tuned the runs under the work root, and whether their baseline was reused:
    # recorded beside them as soon as they are tuned, so that a retime's row says so, whichever
    # row the file holds
    tuned = setup.work_root / f"{args.network}.tuned.json"
    with tempfile.TemporaryDirectory(prefix="ms_heron_networks_") as tmp:
        row, kernels = _tune_and_export(args.network, setup, pathlib.Path(tmp))
        if not args.retime:
            tuned.write_text(
                json.dumps({"commit": commit, "baseline reused": bool(args.baseline_from)})
            )
        (pathlib.Path(tmp) / "labels.json").write_text(
            json.dumps([p["label"] for ps in row["race"].values() for p in ps])
        )
        (pathlib.Path(tmp) / "kernels.json").write_text(json.dumps(kernels))
        timing = subprocess.run(
            [sys.executable, __file__, args.network, "--time-exported", tmp],
            check=True,
            capture_output=True,
            text=True,
        )
        row.update(json.loads(timing.stdout.strip().splitlines()[-1])[args.network])
    # a baseline given the arm's own budget writes where the default does
    stem = f"networks_{args.budget}" + (
        f"_vs_{args.baseline_budget}" if args.baseline_budget not in (None, args.budget) else ""
    )
    path = pathlib.Path(args.out) / f"{stem}.json"
    earlier = json.loads(path.read_text()) if path.exists() else {"data": {}}
    # rows before "cpu"
    data = {name: {"cpu": earlier["host_cpu"], **r} for name, r in earlier["data"].items()}
    reused = bool(args.baseline_from)
    if args.retime:
        known = json.loads(tuned.read_text()) if tuned.exists() else data.get(key)
        if known:  # the records are the tuned commit's; the timing is this one's
            row["timed at"], commit = commit, known["commit"]
            reused = reused or bool(known.get("baseline reused"))
    dot = dot_product(target)
    row["isa"] = (
        f"{args.isa or 'native'} (mcpu {target.attrs['mcpu']}; int8: {dot.isa if dot else '-'})"
    )
    data[key] = {**row, "commit": commit, "cpu": host_cpu_model()}
    if reused:
        data[key]["baseline reused"] = True
    # the plot is written before results_io's files
    pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    _plot(key, data[key], pathlib.Path(args.out) / f"{stem}_{_file_key(key)}_race.png")
    results_io.write(args.out, stem, _markdown(data, args.budget), data)


if __name__ == "__main__":
    main()
