"""The tables every report shows, in the console and in markdown: a run's summary beside its
baseline's, and a model's tasks with their calls, best kernels and bounds."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..relax.tasks import TaskTime
from ..tuning.workdir import Progress


def summary_rows(
    states: list[Progress], ops: float | None, peak: tuple[str, float] | None = None
) -> dict[str, list[str]]:
    """The comparison the console table and report.md both show: row name -> one cell per search.
    ``ops`` None: a model run, whose best is the estimated model latency; ``peak``: the unit whose
    measured peak the kernel is held against ("AVX2", "AMX", "FMA", ...) and that peak in GOPS."""
    found = [s.best_seconds < math.inf for s in states]
    rows = {
        "best latency" if ops is not None else "estimated model latency": [
            f"{s.best_seconds * 1e3:.4f} ms" if ok else "no valid record"
            for s, ok in zip(states, found)
        ],
    }
    if ops is not None:
        rows["GOPS"] = [f"{s.best_gops(ops):.1f}" if ok else "-" for s, ok in zip(states, found)]
    if peak and ops is not None:
        unit, gops = peak
        rows[f"% of measured {unit} peak"] = [
            f"{s.best_gops(ops) / gops:.0%}" if ok else "-" for s, ok in zip(states, found)
        ]
    rows["trials"] = [str(s.trials) for s in states]
    rows["valid share"] = [f"{s.valid / max(s.trials, 1):.0%}" for s in states]
    rows["tuning time"] = [f"{s.elapsed_s:.0f} s" for s in states]
    if len(states) == 2 and all(found):
        rows["speed-up"] = [f"{states[1].best_seconds / states[0].best_seconds:.2f}x", ""]
    return rows


def task_table(arms: Mapping[str, list[TaskTime]]) -> list[str]:
    """Markdown table, one row per task: each arm's best kernel, the task's calls and its share of
    the model's estimated latency (sum of kernel x calls) and its trials in each arm; ratios against
    the first arm."""
    names = list(arms)
    first = arms[names[0]]
    totals = {arm: sum(t.calls * t.seconds for t in times) for arm, times in arms.items()}
    head = "| task | calls | bound ms | " + " | ".join(
        f"{a} ms | {a} share | {a} trials | {a} of bound" for a in names
    )
    head += (
        "".join(f" | {names[0]} speed-up over {a}" for a in names[1:])
        + f" | {names[0]} best from |"
    )
    lines = [head, "|" + "---|" * (4 + 4 * len(names) + len(names) - 1)]
    rows = []
    for i, task in enumerate(first):
        cells = [task.name, f"{task.calls:g}", f"{task.bound_s * 1e3:.4f}"]
        for arm in names:
            t = arms[arm][i]
            cells += [
                f"{t.seconds * 1e3:.4f}",
                f"{t.calls * t.seconds / totals[arm]:.0%}" if totals[arm] < math.inf else "?",
                str(t.trials),
                f"{t.share_of_bound():.0%}",
            ]
        cells += [_speedup(arms[a][i].seconds, task.seconds) for a in names[1:]]
        cells.append(f"{task.space} space" if task.space else "-")
        rows.append((-task.calls * task.seconds, "| " + " | ".join(cells) + " |"))
    lines += [row for _, row in sorted(rows, key=lambda r: r[0])]
    bound = sum(t.calls * t.bound_s for t in first)
    total = ["**model estimate**", "", f"{bound * 1e3:.4f}"]
    total += [
        c
        for a in names
        for c in (
            f"{totals[a] * 1e3:.4f}",
            "",
            str(sum(t.trials for t in arms[a])),
            f"{bound / totals[a]:.0%}",
        )
    ]
    total += [_speedup(totals[a], totals[names[0]]) for a in names[1:]] + [""]
    return lines + ["| " + " | ".join(total) + " |"]


def timing_note(arms: Mapping[str, list[TaskTime]]) -> str:
    """How each arm's kernel times were taken, for a task table's heading (runs from before
    :mod:`ms_heron.tuning.confirm` existed hold their best records' times)."""
    how = {
        arm: "timed again after tuning"
        if any(t.confirmed for t in times)
        else "best record while tuning"
        for arm, times in arms.items()
    }
    if len(set(how.values())) == 1:
        return next(iter(how.values()))
    return "; ".join(f"{arm}: {note}" for arm, note in how.items())


def _speedup(theirs: float, ours: float) -> str:
    return f"{theirs / ours:.2f}x" if 0 < ours < math.inf and theirs < math.inf else "n/a"
