"""What a tuning run found: a markdown summary and a PNG tuning curve, from the work dir alone."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..constraints import derive
from ..intrinsics import ensure_registered
from ..relax.passes import skipped_passes
from ..space import design_spaces
from ..tuning.run import TuningRun
from ..tuning.workdir import Progress
from .tables import summary_rows, task_table

REPORT_FILE = "report.md"
CURVE_FILE = "tuning_curve.png"


@dataclass(kw_only=True)
class Arm:
    """One search's results in a work dir: its records in measured order and its round log."""

    label: str
    run: TuningRun
    seconds: list[float]
    rounds: list[Progress]

    @staticmethod
    def of(label: str, run: TuningRun) -> Arm:
        return Arm(label=label, run=run, seconds=run.seconds(), rounds=run.progress())

    def best_so_far_gops(self, ops: float) -> list[float]:
        out, best = [], math.inf
        for s in self.seconds:
            best = min(best, s)
            out.append(ops / best / 1e9 if best < math.inf else 0.0)
        return out


def arms(run: TuningRun) -> list[Arm]:
    """ms_heron's records, and the baseline's when the run has one."""
    out = [Arm.of("ms_heron (HeronSpace + HeronSearch)", run)]
    baseline = run.baseline()
    if baseline.seconds():
        out.append(Arm.of("MetaSchedule default", baseline))
    return out


def constraint_summaries(run: TuningRun) -> list[dict]:
    """The constraint model of each of HeronSpace's design spaces for this workload."""
    ensure_registered(run.target)
    return [
        derive(space, run.target).summary()
        for space in design_spaces(run.workload.func, run.target, run.space())
    ]


def write(run: TuningRun, peak: tuple[str, float] | None = None) -> tuple[Path, Path]:
    """``report.md`` and ``tuning_curve.png`` in the work dir; returns their paths.

    A kernel's report shows its GOPS curve and its design spaces' constraint models; a model's shows
    the estimated model latency (tasks' best kernels times their calls) and a row per task.
    """
    found = arms(run)
    ops = None if run.is_model else run.workload.ops
    curve = plot(found, ops, run.work_dir / CURVE_FILE, title=run.spec.describe())
    lines = [f"# ms-heron report: {run.spec.describe()}", "", f"Target: `{run.target}`", ""]
    lines += ["| | " + " | ".join(a.label for a in found) + " |", "|---" * (len(found) + 1) + "|"]
    rows = summary_rows([a.run.state() for a in found], ops, peak)
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()]
    lines += ["", f"![tuning curve]({CURVE_FILE})", ""]
    if run.is_model:
        lines += [
            "## Tasks",
            "",
            "Best kernel per task, the model's calls of it and its share of the estimated latency "
            "(`ms-heron show WORK_DIR TASK` prints a task's best schedule).",
            "",
        ]
        lines += task_table({a.label.split(" (")[0]: a.run.task_times() for a in found})
        skipped = skipped_passes(run.lowered)
        if skipped:
            lines += [
                "",
                "## Rewrites skipped",
                "",
                "The model runs without them (TVM's own lowering there):",
                "",
            ]
            lines += [f"- {line}" for line in skipped]
    else:
        lines += ["## Constraint model of each design space", ""]
        lines += [
            "| space | variables | CP-SAT variables | constraints | unconstrained size |",
            "|---|---|---|---|---|",
        ]
        for i, s in enumerate(constraint_summaries(run)):
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(s["constraints"].items()))
            lines.append(
                f"| {i} | {s['variables']} | {s['cp_sat_variables']} | {kinds} | "
                f"{s['unconstrained_space_size']:.3g} |"
            )
    report = run.work_dir / REPORT_FILE
    report.write_text("\n".join(lines) + "\n")
    return report, curve


def plot(found: list[Arm], ops: float | None, path: Path, title: str) -> Path:
    """Best-so-far GOPS (a kernel) or estimated latency (a model, ``ops`` None) against trials and
    time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_trial, by_time) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for arm in found:
        # a model: the estimate exists per round only (a record alone has no model latency)
        if ops is None:
            latency_ms = [
                r.best_seconds * 1e3 if r.best_seconds < math.inf else math.nan for r in arm.rounds
            ]
            for axis, xs in (
                (by_trial, [r.trials for r in arm.rounds]),
                (by_time, [r.elapsed_s for r in arm.rounds]),
            ):
                axis.step(xs, latency_ms, where="post", marker="o", label=arm.label)
            continue
        gops = arm.best_so_far_gops(ops)
        by_trial.plot(range(1, len(gops) + 1), gops, label=arm.label)
        if arm.rounds:
            by_time.step(
                [0.0] + [r.elapsed_s for r in arm.rounds],
                [0.0] + [r.best_gops(ops) for r in arm.rounds],
                where="post",
                label=arm.label,
            )
    what = "best GOPS so far" if ops is not None else "estimated model latency (ms)"
    by_trial.set(xlabel="trials", ylabel=what, title=title)
    by_time.set(xlabel="tuning time (s)", ylabel=what, title="against wall-clock time")
    for ax in (by_trial, by_time):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower right" if ops is not None else "upper right")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
