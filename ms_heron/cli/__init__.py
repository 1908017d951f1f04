"""The ``ms-heron`` command, one module per command.

* ``demo``: tune an int8 VNNI GEMM on this CPU and compare it with ONNX Runtime's
  ``MatMulInteger`` in the same run;
* ``tune``: tune a workload or your kernel into a work dir with live progress, a wall-clock budget
  and an optional MetaSchedule baseline; re-running it on the same work dir resumes;
* ``tune-model``: tune every kernel of an ONNX model through Relax (resumable), save the compiled
  model and compare it with ONNX Runtime on the same file;
* ``report`` / ``show``: what a work dir found, as markdown + PNG, or as TVMScript + trace;
* ``merge``: combine work dirs' records of one target (foreign records skipped with a count).

Errors a user can fix are printed as one line, exit code 2; a tuned kernel whose output is wrong
exits with 1.
"""

from __future__ import annotations

import argparse
import errno
import logging
import sys

from ..errors import HeronError
from ..workloads.evaluate import WrongResult
from . import demo, merge, report, tune, tune_model
from .common import shared_options

#: A full, read-only or over-quota disk: the work dir cannot take more records.
_DISK_ERRORS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EFBIG, errno.EPERM}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ms-heron",
        description="Heron's constraint-aware auto-scheduling on TVM MetaSchedule: tune kernels "
        "and whole models.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    shared = shared_options()
    for command in (demo, tune, tune_model):
        command.add_parser(sub, shared)
    report.add_parsers(sub)
    merge.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.raiseExceptions = False  # a log file on a full disk must not print a traceback per line
    try:
        return args.run(args)
    except HeronError as err:  # its message names the fix: one line, no traceback
        print(f"ms-heron: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in _DISK_ERRORS:
            raise
        print(
            f"ms-heron: error: cannot write {err.filename or 'the work dir'} ({err.strerror}); "
            "every record stored before is kept: free space or make it writable, then run the "
            "same command to resume",
            file=sys.stderr,
        )
        return 2
    # a tuned kernel that computes the wrong thing: a bug to report, not a usage error
    except WrongResult as err:
        print(f"ms-heron: WRONG RESULT: {err}; please report it with the work dir", file=sys.stderr)
        return 1
