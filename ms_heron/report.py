"""What a tuning run found: a markdown summary and a PNG tuning curve, from the work dir alone."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .constraints import derive
from .intrinsics import ensure_registered
from .session import Progress, TuningRun, summary_rows
from .space import design_spaces

REPORT_FILE = "report.md"
CURVE_FILE = "tuning_curve.png"


@dataclass
class Arm:
    """One search's results in a work dir: its records in measured order and its round log."""

    label: str
    run: TuningRun
    seconds: list[float]
    rounds: list[Progress]

    @staticmethod
    def of(label: str, run: TuningRun) -> Arm:
        return Arm(label, run, run.seconds(), run.progress())

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
    ensure_registered()
    return [derive(space, run.target).summary() for space in design_spaces(run.workload.func, run.target, run.space())]


def write(run: TuningRun, peak_gops: float | None = None) -> tuple[Path, Path]:
    """``report.md`` and ``tuning_curve.png`` in the work dir; returns their paths."""
    found = arms(run)
    ops = run.workload.ops
    curve = plot(found, ops, run.work_dir / CURVE_FILE, title=run.spec.describe())
    lines = [f"# ms-heron report: {run.spec.describe()}", "", f"Target: `{run.target}`", ""]
    lines += ["| | " + " | ".join(a.label for a in found) + " |", "|---" * (len(found) + 1) + "|"]
    rows = summary_rows([a.run.state() for a in found], ops, peak_gops)
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()]
    lines += ["", f"![tuning curve]({CURVE_FILE})", "", "## Constraint model of each design space", ""]
    lines += ["| space | variables | CP-SAT variables | constraints | unconstrained size |", "|---|---|---|---|---|"]
    for i, s in enumerate(constraint_summaries(run)):
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(s["constraints"].items()))
        lines.append(f"| {i} | {s['variables']} | {s['cp_sat_variables']} | {kinds} | {s['unconstrained_space_size']:.3g} |")
    report = run.work_dir / REPORT_FILE
    report.write_text("\n".join(lines) + "\n")
    return report, curve


def plot(found: list[Arm], ops: float, path: Path, title: str) -> Path:
    """Best-so-far GOPS against trials and against tuning time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_trial, by_time) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for arm in found:
        gops = arm.best_so_far_gops(ops)
        by_trial.plot(range(1, len(gops) + 1), gops, label=arm.label)
        if arm.rounds:
            by_time.step(
                [0.0] + [r.elapsed_s for r in arm.rounds],
                [0.0] + [r.best_gops(ops) for r in arm.rounds],
                where="post",
                label=arm.label,
            )
    by_trial.set(xlabel="trials", ylabel="best GOPS so far", title=title)
    by_time.set(xlabel="tuning time (s)", ylabel="best GOPS so far", title="against wall-clock time")
    for ax in (by_trial, by_time):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower right")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
