"""``ms-heron tune-model``: tune every kernel of an ONNX model into a work dir (resumable), save the
compiled model and compare it with ONNX Runtime on the same file."""

from __future__ import annotations

import argparse
import math
import re
import time

from ..hardware.targets import cpu_name, num_cores, parse_target
from ..tuning.budget import BUDGET_BOUND_TRIALS, deadline_after
from ..tuning.loop import TRIALS_PER_ROUND
from ..tuning.run import TuningRun
from ..tuning.store import STORE_ENV, RecordStore
from ..tuning.workdir import RunSpec
from .common import (
    Interrupts,
    UsageError,
    add_measure_options,
    add_trials_and_budget,
    clock,
    quiet_metaschedule,
    runner,
    trials_and_budget,
    trials_done,
    tune_arm,
)


def add_parser(sub, shared: argparse.ArgumentParser) -> None:
    model = sub.add_parser(
        "tune-model",
        parents=[shared],
        help="tune every kernel of an ONNX model, compile it, compare with ONNX Runtime",
    )
    model.add_argument("model", help="an .onnx file")
    model.add_argument(
        "--input-shape",
        nargs="+",
        metavar="NAME:DIMS",
        help="static shapes for symbolic inputs, e.g. x:1,128",
    )
    add_trials_and_budget(model, "records over all tasks")
    model.add_argument(
        "--work-dir", help="database and logs (default: ms_heron_models/<model>); re-run to resume"
    )
    model.add_argument(
        "--output", help="compiled model library (default: <work-dir>/<model>_tuned.so)"
    )
    model.add_argument(
        "--exact-math",
        action="store_true",
        help="keep exact exp/erf/tanh (scalar libm calls) instead of TVM's fast vectorized "
        "approximations",
    )
    model.add_argument(
        "--round-size",
        type=int,
        default=TRIALS_PER_ROUND,
        help=f"candidates measured per task round (default {TRIALS_PER_ROUND}; "
        "num_trials_per_iter in Python)",
    )
    model.add_argument(
        "--store",
        help="the records store to seed from and keep the best programs in (default: "
        f"${STORE_ENV}, else ms_heron/records in the user's cache directory)",
    )
    model.add_argument(
        "--no-store", action="store_true", help="neither seed from nor write the records store"
    )
    model.add_argument(
        "--records-from",
        nargs="+",
        default=[],
        metavar="DIR",
        help="more work dirs or stores to seed from (a colleague's, say); records of another "
        "target are skipped",
    )
    model.add_argument(
        "--retune",
        action="store_true",
        help="tune the tasks the store or --records-from hold too (else only timed again)",
    )
    add_measure_options(model)
    model.set_defaults(run=run)


def _input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in items or []:
        match = re.fullmatch(r"([^:]+):(\d+(?:,\d+)*)", item)
        if not match:
            raise UsageError(f"--input-shape takes NAME:DIMS items such as x:1,128, got {item!r}")
        shapes[match.group(1)] = tuple(int(d) for d in match.group(2).split(","))
    return shapes


class _ModelProgressLine:
    """One line per measured round of model tuning: trials, the task just measured, model
    estimate."""

    def __init__(self, tasks: list[str], trials: int, budget_s: float | None):
        self.tasks, self.trials, self.budget_s = tasks, trials, budget_s
        self.started = time.monotonic()

    def __call__(self, p) -> None:
        spent = time.monotonic() - self.started
        model = (
            f"{p.best_seconds * 1e3:.3f} ms" if p.best_seconds < math.inf else "? (tasks untried)"
        )
        budget = f" of {clock(self.budget_s)}" if self.budget_s is not None else ""
        if p.confirmed:
            print(
                f"  best kernels timed again | model ~{model} | {clock(spent)}{budget}", flush=True
            )
            return
        print(
            f"  {trials_done(p.trials, self.trials)} | task {self.tasks.index(p.task) + 1}/"
            f"{len(self.tasks)} {p.task}: best {p.task_seconds * 1e3:.4f} ms | model ~{model} | "
            f"{clock(spent)}{budget}",
            flush=True,
        )


def run(args: argparse.Namespace) -> int:
    # pylint: disable=import-outside-toplevel
    from pathlib import Path

    import numpy as np
    from tvm.s_tir import meta_schedule as ms

    from ..relax import run_model, time_model
    from ..relax.passes import skipped_passes
    from ..report.baselines import (
        BaselineUnavailable,
        max_abs_diff,
        onnxruntime_int8_saturates,
        onnxruntime_model,
        quantized,
        reference_outputs,
    )
    from ..report.tables import task_table

    path = Path(args.model)
    if not path.is_file():
        raise UsageError(f"no ONNX model at {path}")
    trials, budget_s = trials_and_budget(args)
    deadline = deadline_after(budget_s)  # the budget counts the model's import and lowering too
    target = parse_target(args.target)
    work_dir = Path(args.work_dir or f"ms_heron_models/{path.stem}")
    # before the work dir: a refused --rpc leaves none
    measuring = runner(args, cold=True, deadline=deadline)
    run = TuningRun.create(
        work_dir,
        RunSpec.of_model(
            path, _input_shapes(args.input_shape), target, args.seed, exact_math=args.exact_math
        ),
    )
    output = Path(args.output or work_dir / f"{path.stem}_tuned.so")
    tasks = [t.name for t in run.tasks]
    wanted = (
        f"trials until the {clock(budget_s)} budget ends"
        if trials == BUDGET_BOUND_TRIALS
        else f"{trials} trials"
    )
    print(
        f"ms-heron tune-model: {path.name}, {len(tasks)} tasks, {wanted} on "
        f"{cpu_name(run.target)}; records in {work_dir}"
    )
    for line in skipped_passes(run.lowered):
        print(f"note: {line}; the model runs without that rewrite")
    quiet_metaschedule(args.verbose)
    with Interrupts(work_dir) as interrupts:
        if not tune_arm(
            run,
            trials,
            label="ms_heron",
            interrupts=interrupts,
            deadline=deadline,
            on_round=_ModelProgressLine(tasks, trials, budget_s),
            num_trials_per_iter=args.round_size,
            runner=measuring,
            store=None if args.no_store else RecordStore(args.store),
            records_from=args.records_from,
            retune=args.retune,
            pretrained_model=args.pretrained_model,
        ):
            return 130
    print(
        "\nper task (best kernel, timed again after tuning; calls per model run; share of the "
        "model estimate):"
    )
    print("\n".join(task_table({"ms_heron": run.task_times()})))
    executable = run.compile()
    output.parent.mkdir(parents=True, exist_ok=True)
    executable.export_library(str(output))
    rng = np.random.default_rng(args.seed)
    inputs = {p.name: _random_input(rng, p) for p in run.model["main"].params}
    outputs, tuned_s = run_model(executable, inputs), time_model(executable, inputs)
    print(
        f"tuned in {run.state().elapsed_s:.0f} s; compiled model: {output} "
        "(load with tvm.runtime.load_module, run with relax.VirtualMachine)"
    )
    print(
        f"report with plots: ms-heron report {work_dir}; a task's best schedule: ms-heron show "
        f"{work_dir} TASK"
    )
    print(f"{'ms_heron (tuned)':28s}{tuned_s * 1e3:10.3f} ms")
    try:
        ort_inputs = dict(zip(_onnx_input_names(run.onnx_model), inputs.values()))
        ort_outputs, ort_s = onnxruntime_model(
            run.onnx_model, ort_inputs, threads=num_cores(run.target)
        )
    except BaselineUnavailable as err:
        print(f"note: {err}; checking against the untuned model instead")
        check_outputs(
            outputs,
            run_model(run.compile(ms.database.MemoryDatabase(), untuned="naive"), inputs),
            "the untuned model",
        )
        return 0
    if quantized(run.onnx_model):
        reference = reference_outputs(run.onnx_model, ort_inputs)
        # two implementations of a deep quantized graph part by more than 1%: ONNX Runtime's own
        # distance from the exact reference says how far on this input
        rounding = max_abs_diff(ort_outputs, reference)
        if onnxruntime_int8_saturates():
            print(
                "ONNX Runtime's int8 kernels saturate pairs of products on this CPU (no VNNI): "
                "checking against the model's exact arithmetic instead"
            )
            check_outputs(outputs, reference, "the exact reference", rounding=rounding)
        else:
            check_outputs(outputs, ort_outputs, "ONNX Runtime", rounding=rounding)
    else:
        check_outputs(outputs, ort_outputs, "ONNX Runtime")
    diff = max_abs_diff(outputs, ort_outputs)
    print(f"{'ONNX Runtime':28s}{ort_s * 1e3:10.3f} ms")
    print(
        f"speed-up over ONNX Runtime: {ort_s / tuned_s:.2f}x; max abs difference of the outputs: "
        f"{diff:.3g}"
    )
    return 0


def check_outputs(outputs, expected, reference: str, *, rounding: float = 0.0) -> None:
    """The tuned model's outputs on one random input against ``reference``'s: within 1% of the
    outputs' range (fast math and summation order differ, wrong kernels are off by far more).

    A quantized graph gets twice ``rounding`` where that is more: how far two faithful
    implementations of it land apart on this input (ONNX Runtime against the exact reference). A
    float summed in another order moves a value across a quantization step, and every layer after
    it carries the step on: BERT-base quantized dynamically ends 0.07 apart (2% of its range) in
    ONNX Runtime and in ONNX's reference evaluator, while a 6-layer BERT of width 64 agrees to 1e-6.
    Where ONNX Runtime saturates, its distance holds that error too, and the bound is looser.
    """
    import numpy as np  # pylint: disable=import-outside-toplevel

    from ..workloads.evaluate import WrongResult  # pylint: disable=import-outside-toplevel

    carried = False  # whether the rounding carried through the layers set a bound
    for index, (got, want) in enumerate(zip(outputs, expected)):
        want = np.asarray(want, dtype=np.float64)
        err = float(np.abs(np.asarray(got, dtype=np.float64) - want).max())
        range_bound = 1e-2 * max(1.0, float(np.abs(want).max()))
        bound = max(range_bound, 2 * rounding)
        carried |= bound > range_bound
        if not err <= bound:
            why = (
                f"1% of the output range, {range_bound:.3g}"
                if bound == range_bound
                else f"twice ONNX Runtime's own distance from the exact reference, {rounding:.3g}"
            )
            raise WrongResult(
                f"output {index} of the tuned model differs from {reference}'s by {err:.3g} (more "
                f"than {bound:.3g}: {why})"
            )
    within = (
        f" (within {2 * rounding:.3g}: twice ONNX Runtime's own distance from the exact "
        "reference, which a quantized graph's rounding carries through its layers)"
        if carried
        else ""
    )
    print(f"outputs checked against {reference} on a random input: correct{within}")


def _random_input(rng, param):
    """A deterministic input for a Relax parameter: normal floats, small non-negative integers."""
    shape, dtype = [int(d) for d in param.ty.shape.values], str(param.ty.dtype)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 8, size=shape).astype(dtype)


def _onnx_input_names(model) -> list[str]:
    weights = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in weights]
