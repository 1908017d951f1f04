"""Rebuild the pretrained cost model shipped in ``ms_heron/data/cost_model.npz`` from record
directories (work dirs, stores, MetaSchedule databases), so that it improves as records accumulate.

Each task (workload) gives its fastest valid records and a random sample of the rest; a fifth of
the tasks, chosen by their hash, are held out: the model is fitted on the others, its rank
correlation with measured speed on the held-out ones is printed and written into the model's file,
and a sample of them is written as a JSONDatabase for the test that checks the shipped model
(``tests/data/cost_model_held_out``). Usage (repository root):

    .venv/bin/python bench/train_cost_model.py RECORD_DIR [RECORD_DIR ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.target import Target

from ms_heron.records import (
    DATABASE_FILES,
    commit_copy,
    describe_target,
    read_records,
    record_seconds,
)
from ms_heron.search.decision_model import rank_correlation
from ms_heron.search.features import xgb_cost_model
from ms_heron.search.pretrained import (
    PretrainedInfo,
    record_candidates,
    save_pretrained,
    shipped_path,
)

ROOT = Path(__file__).resolve().parent.parent
HELD_OUT_DIR = ROOT / "tests" / "data" / "cost_model_held_out"


def record_dirs(roots: list[Path]) -> list[Path]:
    """Every directory under ``roots`` that holds a JSONDatabase."""
    return sorted(
        {p.parent for root in roots for p in root.rglob(DATABASE_FILES[1])}
        | {r for r in roots if (r / DATABASE_FILES[1]).is_file()}
    )


def targets_of(directory: Path) -> set[str]:
    """The targets a directory's records were measured for (one JSON text each)."""
    found = set()
    for line in (directory / DATABASE_FILES[1]).read_text().splitlines():
        try:
            found.add(json.dumps(json.loads(line)[1][2], sort_keys=True))
        except (ValueError, IndexError, TypeError):
            continue  # read_records warns about it
    return found


def tasks_of(dirs: list[Path]) -> dict[str, tuple]:
    """workload key -> (workload mod, target, valid records), over every directory."""
    tasks: dict[str, tuple] = {}
    for directory in dirs:
        for target_text in targets_of(directory):
            target = Target(json.loads(target_text))
            database = read_records(directory, target).database
            for record in database.get_all_tuning_records():
                if record_seconds(record.run_secs) == math.inf:
                    continue
                key = f"{record.workload.as_json()[0]} {target_text}"
                tasks.setdefault(key, (record.workload.mod, target, []))[2].append(record)
    return tasks


def sample(records: list, best: int, others: int, rng: random.Random) -> list:
    """A task's ``best`` fastest records and ``others`` of the rest at random: the model must tell
    the best apart, and see the range below them."""
    ranked = sorted(records, key=lambda r: record_seconds(r.run_secs))
    rest = ranked[best:]
    return ranked[:best] + rng.sample(rest, min(others, len(rest)))


def context(mod, target: Target) -> ms.TuneContext:
    return ms.TuneContext(mod=mod, target=target, task_name="pretraining")


def held_out(key: str, share: float) -> bool:
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % 1000 < share * 1000


def write_held_out(tested: list[tuple]) -> None:
    """The test's held-out records, a JSONDatabase in :data:`HELD_OUT_DIR` (rewritten)."""
    HELD_OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in DATABASE_FILES:
        (HELD_OUT_DIR / name).write_text("")
    database = ms.database.JSONDatabase(work_dir=str(HELD_OUT_DIR))
    for mod, records in tested:
        for record in records:
            commit_copy(database, mod, record)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="record directories (searched below)")
    parser.add_argument("--best", type=int, default=64, help="fastest records per task")
    parser.add_argument("--others", type=int, default=512, help="other records per task")
    parser.add_argument("--held-out", type=float, default=0.2, help="share of tasks held out")
    parser.add_argument(
        "--held-out-programs", type=int, default=64, help="programs per held-out task rated"
    )
    parser.add_argument(
        "--test-tasks", type=int, default=8, help="held-out tasks written for the test"
    )
    parser.add_argument("--test-programs", type=int, default=16, help="programs of each")
    parser.add_argument("--out", type=Path, default=shipped_path(), help="the model's file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tasks = tasks_of(record_dirs(args.dirs))
    if not tasks:
        sys.exit(f"no valid tuning records under {', '.join(map(str, args.dirs))}")
    model = xgb_cost_model()
    train = [k for k in sorted(tasks) if not held_out(k, args.held_out)]
    test = [k for k in sorted(tasks) if held_out(k, args.held_out)]
    for number, key in enumerate(train, 1):
        mod, target, records = tasks[key]
        chosen = sample(records, args.best, args.others, rng)
        # MetaSchedule's XGBModel retrains on all its data when it grows by a fifth; the last
        # task's update refits it on everything
        model.adaptive_training = number < len(train)
        model.update(
            context(mod, target),
            record_candidates(mod, chosen),
            [RunnerResult(run_secs=r.run_secs, error_msg=None) for r in chosen],
        )
        print(f"[{number}/{len(train)}] {len(chosen)} programs of a task", flush=True)
    # the held-out programs: a random sample of each task's, whatever --best and --others were
    rhos, tested = [], []
    pick = random.Random(args.seed)
    for key in test:
        mod, target, records = tasks[key]
        chosen = pick.sample(records, min(args.held_out_programs, len(records)))
        predicted = model.predict(context(mod, target), record_candidates(mod, chosen))
        rho = rank_correlation(list(predicted), [1 / record_seconds(r.run_secs) for r in chosen])
        print(f"held out: {len(chosen)} programs of a task: rank correlation {rho:.3f}")
        if math.isnan(rho):  # too few programs, or their features (or times) all alike
            continue
        rhos.append(rho)
        if len(tested) < args.test_tasks:
            tested.append((mod, chosen[: args.test_programs]))
    write_held_out(tested)
    rho = float(np.mean(rhos)) if rhos else float("nan")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    info = PretrainedInfo(
        programs=model.data_size,
        tasks=len(train),
        held_out_rho=round(rho, 3),
        cpus=tuple(sorted({describe_target(tasks[k][1].export()) for k in train})),
        commit=commit,
    )
    save_pretrained(model, args.out, info)
    print(
        f"fitted on {model.data_size} programs of {len(train)} tasks; held-out rank correlation "
        f"{rho:.3f} over {len(rhos)} tasks; wrote {args.out} ({args.out.stat().st_size >> 10} KiB)"
        f" and {HELD_OUT_DIR}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
