"""``ms-heron merge``: combine the records of several work dirs (or MetaSchedule databases) of one
target into one work dir, skipping records measured for another target and ones already there."""

from __future__ import annotations

import argparse

from ..hardware.targets import parse_target
from ..tuning.workdir import merge_runs


def add_parser(sub) -> None:
    merge = sub.add_parser("merge", help="combine work dirs' records of one target into DEST")
    merge.add_argument(
        "sources",
        nargs="+",
        metavar="SRC",
        help="work dirs (or MetaSchedule database dirs) to read",
    )
    merge.add_argument(
        "dest", metavar="DEST", help="the work dir to add them to (created if missing)"
    )
    merge.add_argument(
        "--target", help="the target to keep, when DEST is new and no SRC has a run file"
    )
    merge.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    target = parse_target(args.target) if args.target else None
    merged = merge_runs(args.sources, args.dest, target)
    print(f"merged {merged.added} records into {args.dest} ({merged.already_there} already there)")
    for other, count in sorted(merged.foreign.items()):
        print(f"skipped {count} records measured for another target: {other}")
    return 0
