"""Where and how candidates are measured: the local or RPC runner, and cold weights.

MetaSchedule measures with a runner (a local worker process, or TVM's RPC tracker handing out remote
servers). ms_heron adds three things (the time budget is :mod:`.budget`'s, storing is
:mod:`ms_heron.records`'):

* **Cold weights** (:func:`evaluator_config` with ``cold=True``): in a model a kernel's weights come
  from memory, so model tasks are timed with every argument but the first flushed from the caches.
* **Defined arguments** (:func:`filled_arguments`): every float32 a candidate reads is a normal
  number.
* **RPC** (:class:`Tracker`): ``host:port:key`` is checked before tuning (the tracker answers and
  has servers for the key), and the RPC runner keeps one connection per server.
"""

from __future__ import annotations

import functools
import gc
import math
import socket
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import local_runner, rpc_runner
from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common
from tvm.s_tir.meta_schedule.utils import get_global_func_on_rpc_session

from ..errors import HeronError
from ..hardware.amx import TILE_STATE_REQUEST, request_amx_tile_state
from .budget import DEFAULT_TIMEOUT_S, BudgetedRunner


class MeasureError(HeronError, ValueError):
    """Candidates cannot be measured where asked (e.g. no RPC server); the message names the fix."""


def evaluator_config(*, cold: bool, repeat: int = 10) -> ms.runner.EvaluatorConfig | None:
    """MetaSchedule's default timing (None), or ``repeat`` single calls with every argument but the
    first flushed from the CPU caches.

    In a model a kernel's weights come from memory: the layer's other weights passed through the
    caches since its last call, while its first argument, the activation, was just written. Timed
    warm, the search prefers kernels that re-read a weight panel from L3 for every row block, which
    run up to 1.3x slower in the model than kernels that read it once (BERT's FFN projection,
    768x3072 fp32). TVM's Ansor tutorials flush for the same reason.
    """
    if not cold:
        return None
    return ms.runner.EvaluatorConfig(
        number=1, repeat=repeat, min_repeat_ms=0, enable_cpu_cache_flush=True
    )


#: The range a float32 argument is drawn from: the values TVM's measuring fill gives when it fills.
FLOAT_FILL_RANGE = (1.0, 10.0)


def _filler(random_fill_for_measure, uniform):
    """TVM's measuring fill, and a uniform fill in :data:`FLOAT_FILL_RANGE` for float32 tensors
    (TVM's uniform sampler takes float32 alone)."""

    def fill(tensor) -> None:
        if str(tensor.dtype) == "float32":
            uniform(*FLOAT_FILL_RANGE, tensor)
        else:
            random_fill_for_measure(tensor)

    return fill


def filled_arguments(device, args_info: list, alloc_repeat: int) -> list:
    """LocalRunner's arguments, every float32 of them drawn from :data:`FLOAT_FILL_RANGE`.

    TVM's ``random_fill_for_measure`` splits a tensor among the runtime's threads and, with two
    threads (ms_heron's default on 2 cores), leaves the last value of an odd-sized tensor as the
    memory held: a QDQ kernel's one-value scale then read as a subnormal, zero or 1e38, and the
    kernel ran up to 10x slower than on real scales (ResNet-50 int8's conv2d14: 211-2445 us by the
    draw, 237 us on sane values). Its records then ranked candidates by that draw.
    """
    fill = _filler(
        tvm.get_global_func("tvm.contrib.random.random_fill_for_measure"),
        tvm.get_global_func("tvm.contrib.random.uniform"),
    )
    return alloc_argument_common(fill, device, args_info, alloc_repeat)


def filled_arguments_rpc(session, device, args_info: list, alloc_repeat: int) -> list:
    """RPCRunner's arguments, filled on the server as :func:`filled_arguments` fills them."""
    fill = _filler(
        *(
            get_global_func_on_rpc_session(session, name, "the RPC server's TVM needs USE_RANDOM")
            for name in ("tvm.contrib.random.random_fill_for_measure", "tvm.contrib.random.uniform")
        )
    )
    return alloc_argument_common(fill, device, args_info, alloc_repeat)


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
    return undisturbed(
        rpc_runner.default_run_evaluator(session, rt_mod, device, config, repeated_args)
    )


def cold_seconds(rt_mod, args_info: list, repeat: int = 10) -> float:
    """A built kernel's seconds per call on this CPU, timed as the cold runner times a candidate
    (the mean of :func:`undisturbed` single calls on random arguments, all but the first flushed).

    The tuner's estimate of a model is its tasks' records, taken at moments minutes apart; taken
    again beside the compiled model, in turn with it, machine drift drops out of the comparison.
    ``args_info`` is the kernel's ``ArgInfo``s as JSON (``[a.as_json() for a in
    ArgInfo.from_prim_func(f)]``).
    """
    device = tvm.cpu()
    args = filled_arguments(device, args_info, alloc_repeat=1)
    return statistics.mean(
        cold_call_seconds(rt_mod, device, evaluator_config(cold=True, repeat=repeat), args)
    )


@functools.cache
def _tile_grant_library() -> str:
    """A shared library whose ``main`` asks Linux for the AMX tile state (what
    :func:`~ms_heron.hardware.amx.request_amx_tile_state` does), built once per process for plain
    x86-64 so that any measuring server can load it."""
    import tempfile  # pylint: disable=import-outside-toplevel

    from tvm.script import tirx as T  # pylint: disable=import-outside-toplevel

    @T.prim_func(s_tir=True)
    def grant():
        T.func_attr({"global_symbol": "main"})
        T.evaluate(
            T.call_extern(
                "int64",
                "syscall",
                T.int64(TILE_STATE_REQUEST[0]),
                T.int64(TILE_STATE_REQUEST[1]),
                T.int64(TILE_STATE_REQUEST[2]),
            )
        )

    path = tempfile.mkstemp(prefix="ms_heron_tile_grant_", suffix=".so")[1]
    tvm.compile(grant, target={"kind": "llvm", "mtriple": "x86_64-linux-gnu"}).export_library(path)
    return path


def session_after_releasing_the_last(rpc_config: ms.runner.RPCConfig):
    """RPCRunner's session, requested after this worker's previous one is released.

    A finished candidate's session can outlive it in a reference cycle (its device keeps it alive)
    until Python's cycle collector runs; its server counts as busy until then. With as many
    workers as servers, the next candidate then waited for a server until the lingering session's
    timeout: a first round of 4 candidates on 2 servers took 34 s instead of 6 s here."""
    gc.collect()
    return rpc_runner.default_create_session(rpc_config)


def upload_with_tile_grant(session, local_path: str, remote_path: str):
    """RPCRunner's module upload, after the server process asked Linux for the AMX tile state: a
    server started without ms_heron would die on the first tile kernel, and the runner waits on a
    dead server until its session times out."""
    if request_amx_tile_state():  # only an x86-64 Linux host uploads it (and builds tile kernels)
        session.upload(_tile_grant_library(), "ms_heron_tile_grant.so")
        session.load_module("ms_heron_tile_grant.so")["main"]()
    return rpc_runner.default_upload_module(session, local_path, remote_path)


def local_runner_for(
    *, cold: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ms.runner.LocalRunner:
    """A LocalRunner: MetaSchedule's timing, or cold weights (see :func:`evaluator_config`). Its
    worker processes ask the OS for the AMX tile state first, as the tuning process did."""
    return ms.runner.LocalRunner(
        timeout_sec=timeout_s,
        evaluator_config=evaluator_config(cold=cold),
        f_alloc_argument=filled_arguments,
        f_run_evaluator=cold_call_seconds if cold else None,
        initializer=request_amx_tile_state,
    )


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
            raise MeasureError(
                "--rpc takes HOST:PORT:KEY of a TVM RPC tracker, such as 127.0.0.1:9190:zen5, got "
                f"{text!r}"
            )
        return Tracker(host, int(port), rest)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}:{self.key}"

    def servers(self) -> int:
        """How many servers the tracker holds for the key (free or busy); refuses with the fix when
        the tracker does not answer or holds none."""
        from tvm import rpc  # pylint: disable=import-outside-toplevel

        try:
            # TVM's own connect retries for a minute
            socket.create_connection((self.host, self.port), timeout=5).close()
            summary = rpc.connect_tracker(self.host, self.port).summary()
        except (OSError, RuntimeError) as err:
            raise MeasureError(
                f"no RPC tracker answers at {self.host}:{self.port} ({err}); start one with "
                f"python -m tvm.exec.rpc_tracker --host {self.host} --port {self.port}"
            ) from None
        # "server:KEY" per server
        keys = [info["key"].split(":")[-1] for info in summary.get("server_info", [])]
        count = keys.count(self.key)
        if not count:
            held = (
                f"it holds servers for {', '.join(sorted(set(keys)))}"
                if keys
                else "it holds no server"
            )
            raise MeasureError(
                f"the RPC tracker at {self.host}:{self.port} has no server for key {self.key!r} "
                f"({held}); start one on each measuring machine: python -m tvm.exec.rpc_server "
                f"--tracker {self.host}:{self.port} --key {self.key}"
            )
        return count

    def runner(self, *, cold: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> BudgetedRunner:
        """An RPCRunner with one connection per server the tracker holds now, measuring that many
        candidates at a time."""
        servers = self.servers()
        config = ms.runner.RPCConfig(
            tracker_host=self.host,
            tracker_port=self.port,
            tracker_key=self.key,
            session_priority=1,
            session_timeout_sec=max(1, math.ceil(timeout_s)),
        )
        rpc = ms.runner.RPCRunner(
            config,
            evaluator_config(cold=cold),
            max_workers=servers,
            f_create_session=session_after_releasing_the_last,
            f_upload_module=upload_with_tile_grant,
            f_alloc_argument=filled_arguments_rpc,
            f_run_evaluator=cold_call_seconds_rpc if cold else None,
        )
        return BudgetedRunner(rpc, width=servers)
