"""Where and how candidates are measured: the local or RPC runner, cold weights, the time budget.

MetaSchedule measures with a runner (a local worker process, or TVM's RPC tracker handing out remote
servers) and stores every result with its ``AddToDatabase`` callback. ms_heron adds three things:

* **Cold weights** (:func:`evaluator_config` with ``cold=True``): in a model a kernel's weights come
  from memory, so model tasks are timed with every argument but the first flushed from the caches.
* **RPC** (:class:`Tracker`): ``host:port:key`` is checked before tuning (the tracker answers and has
  servers for the key), and the RPC runner keeps one connection per server.
* **A budget that holds** (:class:`Budget`, :class:`BudgetedRunner`, :class:`StoreMeasured`): once
  the deadline has passed, the rest of a round is not run, and those candidates are not stored as
  failures (a resumed run measures them); timeouts are capped by the budget, so a hanging candidate
  overruns it by at most one timeout.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import local_runner, rpc_runner
from tvm.s_tir.meta_schedule.runner.runner import PyRunner, PyRunnerFuture

#: MetaSchedule's default per-candidate build and run timeout, in seconds.
DEFAULT_TIMEOUT_S = 30.0
#: A runner result's error for a candidate left unmeasured because the time budget was spent.
NOT_RUN = "ms_heron: not run, the time budget was spent"


class MeasureError(ValueError):
    """Candidates cannot be measured where asked (e.g. no RPC server); the message names the fix."""


def was_run(result) -> bool:
    """False for a candidate :class:`BudgetedRunner` left unmeasured."""
    return result.error_msg != NOT_RUN


def evaluator_config(*, cold: bool, repeat: int = 10) -> ms.runner.EvaluatorConfig | None:
    """MetaSchedule's default timing (None), or ``repeat`` single calls with every argument but the
    first flushed from the CPU caches.

    In a model a kernel's weights come from memory: the layer's other weights passed through the
    caches since its last call, while its first argument, the activation, was just written. Timed
    warm, the search prefers kernels that re-read a weight panel from L3 for every row block, which
    run up to 1.3x slower in the model than kernels that read it once (BERT's FFN projection, 768x3072
    fp32). TVM's Ansor tutorials flush for the same reason.
    """
    if not cold:
        return None
    return ms.runner.EvaluatorConfig(number=1, repeat=repeat, min_repeat_ms=0, enable_cpu_cache_flush=True)


def undisturbed(costs: Sequence[float]) -> list[float]:
    """``costs`` minus the calls a descheduled worker thread stretched past 1.5x their median.

    Single calls after a flush leave the thread pool idle between them; now and then a worker is
    descheduled and one call takes milliseconds instead of microseconds. A record's time is the mean
    of its samples (MetaSchedule's cost model and task scheduler read it so), so those calls are
    dropped before they turn a fast kernel's record into a slow one.
    """
    median = statistics.median(costs)
    return [c for c in costs if c <= 1.5 * median]


def cold_call_seconds(rt_mod, device, config, repeated_args) -> list[float]:
    """LocalRunner's evaluator, keeping the :func:`undisturbed` calls."""
    return undisturbed(local_runner.default_run_evaluator(rt_mod, device, config, repeated_args))


def cold_call_seconds_rpc(session, rt_mod, device, config, repeated_args) -> list[float]:
    """RPCRunner's evaluator, keeping the :func:`undisturbed` calls."""
    return undisturbed(rpc_runner.default_run_evaluator(session, rt_mod, device, config, repeated_args))


def local_runner_for(*, cold: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> ms.runner.LocalRunner:
    """A LocalRunner: MetaSchedule's timing, or cold weights (see :func:`evaluator_config`)."""
    return ms.runner.LocalRunner(timeout_sec=timeout_s, evaluator_config=evaluator_config(cold=cold),
                                 f_run_evaluator=cold_call_seconds if cold else None)


@dataclass(frozen=True)
class Tracker:
    """A TVM RPC tracker and the key its measuring servers registered with (``HOST:PORT:KEY``)."""

    host: str
    port: int
    key: str

    @staticmethod
    def parse(text: str) -> Tracker:
        host, _, rest = text.rpartition(":")
        host, _, port = host.rpartition(":")
        if not host or not port.isdigit() or not rest:
            raise MeasureError(f"--rpc takes HOST:PORT:KEY of a TVM RPC tracker, such as 127.0.0.1:9190:zen5, got {text!r}")
        return Tracker(host, int(port), rest)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}:{self.key}"

    def servers(self) -> int:
        """How many servers the tracker holds for the key (free or busy); refuses with the fix when
        the tracker does not answer or holds none."""
        from tvm import rpc  # pylint: disable=import-outside-toplevel

        try:
            socket.create_connection((self.host, self.port), timeout=5).close()  # TVM's own connect retries for a minute
            summary = rpc.connect_tracker(self.host, self.port).summary()
        except (OSError, RuntimeError) as err:
            raise MeasureError(
                f"no RPC tracker answers at {self.host}:{self.port} ({err}); start one with "
                f"python -m tvm.exec.rpc_tracker --host {self.host} --port {self.port}"
            ) from None
        keys = [info["key"].split(":")[-1] for info in summary.get("server_info", [])]  # "server:KEY" per server
        count = keys.count(self.key)
        if not count:
            held = f"it holds servers for {', '.join(sorted(set(keys)))}" if keys else "it holds no server"
            raise MeasureError(
                f"the RPC tracker at {self.host}:{self.port} has no server for key {self.key!r} ({held}); start one "
                f"on each measuring machine: python -m tvm.exec.rpc_server --tracker {self.host}:{self.port} --key {self.key}"
            )
        return count

    def runner(self, *, cold: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> BudgetedRunner:
        """An RPCRunner with one connection per server the tracker holds now, measuring that many
        candidates at a time."""
        servers = self.servers()
        config = ms.runner.RPCConfig(tracker_host=self.host, tracker_port=self.port, tracker_key=self.key,
                                     session_priority=1, session_timeout_sec=max(1, math.ceil(timeout_s)))
        rpc = ms.runner.RPCRunner(config, evaluator_config(cold=cold), max_workers=servers,
                                  f_run_evaluator=cold_call_seconds_rpc if cold else None)
        return BudgetedRunner(rpc, width=servers)


@derived_object
class _Done(PyRunnerFuture):
    """A runner future whose result is already known."""

    def __init__(self, result: ms.runner.RunnerResult):
        super().__init__()
        self.value = result

    def done(self) -> bool:
        return True

    def result(self) -> ms.runner.RunnerResult:
        return self.value


class Budget:
    """A wall-clock deadline shared by the search (no new round once it has passed) and the runner
    (the rest of a round is left unmeasured).

    A task's first round is ``guaranteed`` (the search sets it): past the deadline it is measured
    until one candidate is valid or one times out, so every task of a model gets a kernel and a
    round of hanging candidates still costs one timeout at most.
    """

    def __init__(self, deadline: float | None = None):
        self.deadline = deadline
        self.guaranteed = False

    def spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


@derived_object
class BudgetedRunner(PyRunner):
    """``inner`` measuring ``width`` candidates at a time (its parallel workers), leaving the rest of
    a round unmeasured (:data:`NOT_RUN`) once the :class:`Budget` is spent."""

    def __init__(self, inner: ms.runner.Runner, width: int = 1, budget: Budget | None = None):
        super().__init__()
        self.inner, self.width, self.budget = inner, max(1, width), budget or Budget()

    def until(self, budget: Budget) -> BudgetedRunner:
        """The same runner under ``budget``."""
        return BudgetedRunner(self.inner, self.width, budget)

    def run(self, runner_inputs):
        results = []
        settled = False  # a guaranteed round has a valid candidate, or a timed-out one
        for start in range(0, len(runner_inputs), self.width):
            chunk = list(runner_inputs[start:start + self.width])
            if self.budget.spent() and (settled or not self.budget.guaranteed):
                results += [ms.runner.RunnerResult(None, NOT_RUN) for _ in chunk]
                continue
            ran = [future.result() for future in self.inner.run(chunk)]
            settled = settled or any(r.error_msg is None or "Timeout" in r.error_msg for r in ran)
            results += ran
        return [_Done(r) for r in results]


@derived_object
class StoreMeasured(PyMeasureCallback):
    """MetaSchedule's ``AddToDatabase`` for candidates that were run: a candidate the budget left
    unmeasured is not stored as a failure, so a resumed run measures it.

    JSONDatabase appends with a C++ stream that fails silently on a full or read-only disk; given
    the ``records_file`` it writes, the round's lines are checked to have landed whole, and an
    ``OSError`` stops tuning instead of measuring on into nothing.
    """

    def __init__(self, database: ms.Database, records_file: Path | None = None):
        super().__init__()
        self.database, self.records_file = database, records_file
        self.failure: OSError | None = None

    def apply(self, task_scheduler, task_id, candidates, _builder_results, runner_results) -> None:
        context = task_scheduler.tasks_[task_id].ctx
        workload = self.database.commit_workload(context.mod)
        before = self._size()
        stored = 0
        for candidate, result in zip(candidates, runner_results):
            if not was_run(result):
                continue
            secs = list(result.run_secs) if result.run_secs is not None else [1e10]
            self.database.commit_tuning_record(
                ms.database.TuningRecord(candidate.sch.trace, workload, secs, context.target, candidate.args_info))
            stored += 1
        if stored and self.records_file is not None and not self._landed(before):
            self.failure = OSError(errno.ENOSPC, "the round's records did not reach the disk (full or read-only?)",
                                   str(self.records_file))
            raise self.failure

    def _size(self) -> int:
        return self.records_file.stat().st_size if self.records_file is not None and self.records_file.exists() else 0

    def _landed(self, before: int) -> bool:
        if self._size() <= before:
            return False
        with open(self.records_file, "rb") as records:
            records.seek(-1, os.SEEK_END)
            return records.read(1) == b"\n"


@contextlib.contextmanager
def disk_errors_surface(callbacks: Sequence):
    """Re-raise a :class:`StoreMeasured` disk failure as the ``OSError`` it is: raised inside the
    task scheduler, it comes out of TVM's FFI as a ``RuntimeError``."""
    try:
        yield
    except Exception:
        for callback in callbacks:
            failure = getattr(callback, "failure", None)
            if isinstance(failure, OSError):
                raise failure from None
        raise


def measure_callbacks(database: ms.Database, records_file: Path | None = None) -> list:
    """MetaSchedule's default measure callbacks, storing with :class:`StoreMeasured`."""
    return [StoreMeasured(database, records_file), ms.measure_callback.RemoveBuildArtifact(),
            ms.measure_callback.UpdateCostModel()]


def budget_timeout(budget_s: float | None) -> float:
    """A build's or run's timeout under a time budget: a hanging candidate cannot outlast it."""
    return DEFAULT_TIMEOUT_S if budget_s is None else max(1.0, min(DEFAULT_TIMEOUT_S, budget_s))
