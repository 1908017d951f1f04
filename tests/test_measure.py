"""Measurement that survives real use: RPC servers through TVM's tracker (on loopback), budgets that
hold against hanging candidates, crashing candidates, merged databases."""

import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import tvm
from conftest import HOST_DTYPE, ms_heron_cli, ms_heron_clis, suite
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.script import tirx as T

from ms_heron import workloads
from ms_heron.hardware.targets import host_target, target_json
from ms_heron.records import (
    CHOICE_TOP_K,
    add_confirmed,
    confirmed_seconds,
    json_lines,
    measured_seconds,
    record_key,
    record_seconds,
)
from ms_heron.relax import extract_tasks
from ms_heron.search.cga import BUILD_TIMEOUT, HeronSearch
from ms_heron.testing import models
from ms_heron.tuning import RunError, RunSpec, TuningRun
from ms_heron.tuning.budget import (
    LATE_ROUND,
    MIN_TIMEOUT_S,
    Budget,
    RoundClock,
    WatchedSearch,
    deadline_after,
    python_clone,
)
from ms_heron.tuning.builder import build_candidate, local_builder
from ms_heron.tuning.measure import (
    DEFAULT_TIMEOUT_S,
    FLOAT_FILL_RANGE,
    MeasureError,
    Tracker,
    cold_seconds,
    filled_arguments,
)

SMALL_GEMM = ("gemm", "--shape", "M=64", "N=64", "K=64")

#: No candidate of this kernel finishes: 16 x 10^18 dependent multiply-adds. (MetaSchedule's own
#: rules fail on its loops, so it also shows a task tuning in HeronSpace's spaces alone.)
SPIN_KERNEL = """
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def spin(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i, k, j in T.grid(16, 1000000000, 1000000000):
        with T.sblock("acc"):
            vi, vk, vj = T.axis.remap("SRR", [i, k, j])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] * T.float32(0.5) + A[vi]
"""

#: Each candidate of this kernel reads 4 GB past its input: the measuring process dies (SIGSEGV).
CRASH_KERNEL = """
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def crash(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi + 1000000000]
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Fleet:
    """A TVM RPC tracker and ``rpc_server`` processes on 127.0.0.1, as a user starts them."""

    def __init__(self, key: str):
        self.key, self.port = key, _free_port()
        self.tracker = self._start("rpc_tracker", "--port", self.port, "--port-end", self.port + 1)
        self.servers = []
        self.address = Tracker("127.0.0.1", self.port, key)
        self._wait_until(
            lambda: socket.create_connection(("127.0.0.1", self.port), timeout=1).close() or True,
            "the RPC tracker did not start",
        )

    @staticmethod
    def _start(module, *args):
        # Its own process group: an RPC server's popen workers go with it when it is killed.
        return subprocess.Popen(
            [sys.executable, "-m", f"tvm.exec.{module}", "--host", "127.0.0.1", *map(str, args)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def add_servers(self, count: int) -> None:
        for _ in range(count):
            port = _free_port()
            self.servers.append(
                self._start(
                    "rpc_server",
                    "--port",
                    port,
                    "--port-end",
                    port + 1,
                    "--tracker",
                    f"127.0.0.1:{self.port}",
                    "--key",
                    self.key,
                )
            )
        self._wait_until(
            lambda: self.address.servers() == len(self.servers),
            "RPC servers did not register with the tracker",
        )

    @staticmethod
    def _wait_until(ready, failure: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if ready():
                    return
            except (MeasureError, OSError):
                pass
            assert time.monotonic() < deadline, failure
            time.sleep(0.5)

    @staticmethod
    def kill(proc) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # killed already
            pass
        proc.wait()

    def close(self) -> None:
        for proc in [*self.servers, self.tracker]:
            self.kill(proc)


@pytest.fixture
def fleet():
    started = Fleet("ms-heron-test")
    yield started
    started.close()


def _run(tmp_path, name, seed=0):
    workload = suite("gemm", HOST_DTYPE, M=64, N=64, K=64)
    return TuningRun.create(tmp_path / name, RunSpec.of(workload, host_target(), seed))


def test_a_candidates_float32_arguments_hold_no_undefined_value():
    """TVM's fill, on two threads, left an odd-sized tensor's last value undefined: a QDQ kernel's
    one-value scale read as a subnormal and the kernel ran up to 10x slower than on real scales."""
    low, high = FLOAT_FILL_RANGE
    args_info = [["TENSOR", "float32", [1]], ["TENSOR", "float32", [7]], ["TENSOR", "uint8", [5]]]
    for scale, row, zero_points in filled_arguments(tvm.cpu(), args_info, alloc_repeat=20):
        values = np.concatenate([scale.numpy(), row.numpy()])
        assert ((values >= low) & (values <= high)).all(), values
        assert zero_points.numpy().shape == (5,)


def test_rpc_servers_measure_like_the_local_runner(tmp_path, fleet):
    fleet.add_servers(2)
    # a server kept busy by a finished candidate's session frees at this timeout
    session_timeout_s = 120
    started = time.monotonic()
    remote = _run(tmp_path, "rpc").tune(
        8, num_trials_per_iter=4, runner=fleet.address.runner(timeout_s=session_timeout_s)
    )
    remote_s = time.monotonic() - started
    local = _run(tmp_path, "local").tune(8, num_trials_per_iter=4)
    assert (remote.trials, remote.valid) == (local.trials, local.valid) == (8, 8)
    assert remote_s < session_timeout_s / 2, f"8 candidates on 2 servers took {remote_s:.0f} s"


def test_a_killed_rpc_server_leaves_tuning_to_the_other_and_loses_no_record(tmp_path, fleet):
    fleet.add_servers(2)
    run = _run(tmp_path, "rpc")

    def kill_after_first_round(progress):
        if progress.trials == 4:
            fleet.kill(fleet.servers[0])

    state = run.tune(
        12, num_trials_per_iter=4, runner=fleet.address.runner(), on_round=kill_after_first_round
    )
    seconds = measured_seconds(run.work_dir)
    assert state.trials == len(seconds) == 12  # every candidate of every round is stored
    # the round measured before the kill, as it was
    assert all(s < float("inf") for s in seconds[:4])
    # the last round ran on the other server
    assert sum(s < float("inf") for s in seconds[-4:]) >= 1


def test_rpc_tracker_without_a_server_for_the_key_gets_one_line(tmp_path, fleet):
    proc = ms_heron_cli(
        "tune",
        *SMALL_GEMM,
        "--trials",
        "4",
        "--rpc",
        f"127.0.0.1:{fleet.port}:absent",
        "--work-dir",
        tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"ms-heron: error: the RPC tracker at 127.0.0.1:{fleet.port} has no server for key "
        "'absent' (it holds no server); start one on each measuring machine: python -m "
        f"tvm.exec.rpc_server --tracker 127.0.0.1:{fleet.port} --key absent"
    )
    nobody = ms_heron_cli(
        "tune", *SMALL_GEMM, "--rpc", f"127.0.0.1:{_free_port()}:k", "--work-dir", tmp_path
    )
    assert nobody.returncode == 2 and "no RPC tracker answers at 127.0.0.1:" in nobody.stderr
    assert len(nobody.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("where", ["local", "rpc"])
def test_hanging_candidates_overrun_the_budget_by_one_timeout_at_most(tmp_path, where, request):
    source = tmp_path / "spin.py"
    source.write_text(SPIN_KERNEL)
    work = tmp_path / "run"
    budget = 8
    measuring = []
    if where == "rpc":  # the RPC session's timeout is capped by the budget like the local runner's
        fleet = request.getfixturevalue("fleet")
        fleet.add_servers(1)
        measuring = ["--rpc", f"127.0.0.1:{fleet.port}:{fleet.key}"]
    proc = ms_heron_cli(
        "tune",
        source,
        "--trials",
        "64",
        "--round-size",
        "8",
        "--time-budget",
        f"{budget}s",
        "--work-dir",
        work,
        *measuring,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MetaSchedule's default design spaces fail on this task and are left out" in proc.stderr
    (last,) = json_lines(work / "progress.jsonl")[-1:]
    assert last["trials"] == 1 and last["valid"] == 0
    # Build and run timeouts are capped by the budget (8 s here, raised to the 10 s floor): one
    # hanging candidate, then the round is left. Uncapped, that one alone would run for
    # MetaSchedule's 30 s timeout. Timed from the task scheduler's log, round start to round end:
    # the process's set-up before it (import, probes, spaces) doubles when the suite's other worker
    # is busy and says nothing about the timeouts.
    sent, updated = _round_span(work / "logs")
    assert (updated - sent).total_seconds() < DEFAULT_TIMEOUT_S, (sent, updated)


def _round_span(logs):
    """When the first round's candidates went to the builder and when the round's results came back,
    from MetaSchedule's task-scheduler log (whole seconds)."""
    (log,) = logs.glob("*task_scheduler.log")
    stamps = {}
    for line in log.read_text().splitlines():
        for event in ("to builder", "[Updated]"):
            if event in line:
                stamps.setdefault(event, datetime.datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
    return stamps["to builder"], stamps["[Updated]"]


def test_a_candidate_that_crashes_its_process_does_not_stop_tuning(tmp_path):
    source = tmp_path / "crash.py"
    source.write_text(CRASH_KERNEL)
    proc = ms_heron_cli(
        "tune", source, "--trials", "4", "--round-size", "2", "--work-dir", tmp_path / "run"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"ms_heron:\s+4/4 trials", proc.stdout) and "no valid record" in proc.stdout, (
        proc.stdout
    )
    assert measured_seconds(tmp_path / "run") == [float("inf")] * 4


def test_the_budget_keeps_its_reserve_for_the_work_after_tuning():
    assert Budget(time.monotonic() + 60, reserve_s=lambda: 61.0).spent()
    assert not Budget(time.monotonic() + 60, reserve_s=lambda: 30.0).spent()
    # the reserve's price of a candidate leaves out set-up and the search's work: the work after
    # tuning builds and times, it does not search
    clock = RoundClock()  # set-up took 107 s
    assert clock.candidate_s() == 0.0
    clock.round_started(at=107.0, search_s=1.0, candidates=16)
    clock.searched(0.5)  # taking in its results
    assert clock.candidate_s() == 0.0  # no round has ended
    clock.round_started(at=115.0, search_s=2.0, candidates=16)
    assert clock.candidate_s() == pytest.approx((8.0 - 1.5) / 16)
    assert clock.round_search_s() == pytest.approx(1.75)


def test_first_rounds_are_cut_so_the_tasks_not_yet_started_fit_in_the_time_left():
    clock = RoundClock()
    clock.tasks = 5
    clock.first_rounds = 2  # two started: 3 to go, this one too
    # nothing known of a round's cost yet: a whole round
    assert WatchedSearch("evolutionary", Budget(time.monotonic() + 5), clock).first_round(16) == 16
    clock.round_started(at=0.0, search_s=1.0, candidates=16)
    clock.round_started(at=4.0, search_s=1.0, candidates=16)  # the first: 3 s for 16 candidates

    def first_round(seconds_left: float | None) -> int:
        deadline = None if seconds_left is None else time.monotonic() + seconds_left
        return WatchedSearch("evolutionary", Budget(deadline), clock).first_round(16)

    assert first_round(None) == 16  # no deadline
    assert first_round(60.0) == 16  # 20 s a task: more than a round's 4 s
    assert first_round(5.0) == 3  # 1.67 s a task: 1 s of search and 3 x 0.19 s
    assert first_round(0.5) == LATE_ROUND  # less than the search: the least round
    assert first_round(-1.0) == LATE_ROUND  # past the deadline
    # the first rounds' search, paid once (whole rounds bred, a pretrained booster loaded), does
    # not price the rounds after it: searches of 3.5, 2.3, then 0.2 s, 5 candidates of 0.2 s each
    clock = RoundClock()
    clock.tasks, clock.first_rounds = 5, 2
    for at, search_s in ((0.0, 3.5), (4.5, 2.3), (7.8, 0.2), (9.0, 0.2), (10.2, 0.2)):
        clock.round_started(at=at, search_s=search_s, candidates=5)
    assert clock.candidate_s() == pytest.approx(0.2)
    assert clock.round_search_s() == pytest.approx(1.28)  # the mean, as reports give it
    assert first_round(5.0) == 7  # 1.67 s a task: 0.2 s of search and 7 x 0.2 s
    # a task's clone of the search keeps HeronSearch's own round of a given size (TVM's clone
    # through its FFI returns the base object, without it)
    clone = python_clone(HeronSearch())
    assert isinstance(clone, HeronSearch) and callable(clone.generate_round)


def test_a_model_under_a_tiny_budget_gives_every_task_a_round_and_chooses_by_times_taken_again(
    tmp_path,
):
    model = models.mlp()  # two dense layers: two tasks
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.proto.SerializeToString())
    run = TuningRun.create(tmp_path / "run", RunSpec.of_model(path, {}, host_target(), seed=0))
    run.tune(400, deadline=deadline_after(1), num_trials_per_iter=4)
    times = run.task_times()
    assert len(times) == 2 and all(t.seconds < float("inf") and t.confirmed for t in times), times
    assert run.state().trials < 400

    # more records; each task's fastest were all timed again, and the model runs the fastest by
    # those times
    run.tune(16, num_trials_per_iter=4)
    database, confirmed = run.database(), confirmed_seconds(run.work_dir)
    times = run.task_times()
    for task, t in zip(extract_tasks(run.lowered, run.target), times):
        top = [
            r
            for r in database.get_top_k(database.commit_workload(task.dispatched[0]), CHOICE_TOP_K)
        ]
        valid = [record_key(r) for r in top if record_seconds(r.run_secs) < float("inf")]
        assert len(valid) >= 2 and set(valid) <= set(confirmed), (task.task_name, valid)
        assert t.seconds == min(confirmed[k] for k in valid)
        # the slowest of them timed again as the fastest: the compiled model and the estimate follow
        add_confirmed(run.work_dir, {valid[-1]: t.seconds / 10})
        assert str(run.best_schedule(task.task_name).trace) == str(top[len(valid) - 1].trace)
    assert run.state().best_seconds == pytest.approx(sum(t.calls * t.seconds / 10 for t in times))


def test_only_a_model_run_times_its_tasks_again(tmp_path):
    run = _run(tmp_path, "kernel")
    with pytest.raises(
        RunError, match=r"is a kernel run; only a model run's tasks are timed again"
    ):
        run.confirm()


def test_merge_combines_records_of_one_target_and_skips_foreign_ones(tmp_path):
    other = json.dumps(target_json(host_target(num_cores=1)))
    for tuned in ms_heron_clis(
        ("tune", *SMALL_GEMM, "--trials", "3", "--seed", 1, "--work-dir", tmp_path / "a"),
        ("tune", *SMALL_GEMM, "--trials", "3", "--seed", 2, "--work-dir", tmp_path / "b"),
        ("tune", *SMALL_GEMM, "--trials", "2", "--target", other, "--work-dir", tmp_path / "c"),
    ):
        assert tuned.returncode == 0, tuned.stderr[-2000:]
    before = {n: (tmp_path / n / "database_tuning_record.json").read_bytes() for n in "abc"}
    # Both seeds measure each Heron space's analytical choice first: those programs are the same.
    distinct = len(
        {
            json.dumps(line[1][0])
            for n in "ab"
            for line in json_lines(tmp_path / n / "database_tuning_record.json")
        }
    )
    assert 3 <= distinct <= 6
    proc = ms_heron_cli("merge", tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "all")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        f"merged {distinct} records into {tmp_path / 'all'} ({6 - distinct} already there)"
        in proc.stdout
    )
    assert (
        "skipped 2 records measured for another target: llvm" in proc.stdout
        and "num-cores=1" in proc.stdout
    )
    assert {n: (tmp_path / n / "database_tuning_record.json").read_bytes() for n in "abc"} == before
    assert len(measured_seconds(tmp_path / "all")) == distinct
    again = ms_heron_cli("merge", tmp_path / "a", tmp_path / "all")
    assert "merged 0 records" in again.stdout and "(3 already there)" in again.stdout
    # the merged dir is a run: show and report work on it
    show = ms_heron_cli("show", tmp_path / "all")
    assert show.returncode == 0 and "sch.get_sblock" in show.stdout, show.stderr[-2000:]


# A float ``min`` reduction unrolled 64 deep: TVM 0.27's LLVM does not finish building it in minutes
# (for -mcpu=haswell, whatever the host); MetaSchedule's unroll decisions make such
# candidates of a model's small reductions.
@T.prim_func(s_tir=True)
def never_builds(x: T.Buffer((16, 64), "float32"), y: T.Buffer((), "float32")):
    T.func_attr({"tirx.noalias": True})
    with T.sblock("init"):
        y[()] = T.float32(3.4e38)
    for k0 in T.serial(
        16, annotations={"pragma_auto_unroll_max_step": 64, "pragma_unroll_explicit": 1}
    ):
        for k1 in range(64):
            with T.sblock("update"):
                v0, v1 = T.axis.remap("RR", [k0, k1])
                y[()] = T.min(y[()], x[v0, v1])


def test_a_round_built_past_the_budget_waits_the_least_timeout_for_a_hanging_build():
    """A build's time limit is what the budget leaves when its round is built (never below
    ``MIN_TIMEOUT_S``), not what it left when tuning began: a 30 s budget's late rounds waited 28 s
    for each candidate LLVM hangs on. Past the deadline, such a candidate is killed at the floor."""
    haswell = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
    builder = local_builder(max_workers=1, deadline=time.monotonic() - 1)
    started = time.monotonic()
    (result,) = builder.build([BuilderInput(tvm.IRModule({"main": never_builds}), haswell)])
    assert result.error_msg == f"LocalBuilder: Timeout, killed after {MIN_TIMEOUT_S} seconds"
    assert time.monotonic() - started < DEFAULT_TIMEOUT_S


def test_the_builder_keeps_its_workers_across_rounds_and_reports_a_timeout_as_local_builder_does(
    cpu_target,
):
    """TVM's LocalBuilder starts new worker processes every round, each importing TVM and ms_heron
    before its first build; ms_heron's builder builds the next round in the same processes. A build
    over its time limit is reported in LocalBuilder's words, which the search recognizes."""
    func = workloads.make("gemm", "fp32", M=16, N=16, K=16).func
    inputs = [BuilderInput(tvm.IRModule({"main": func}), cpu_target)] * 2
    builder, me = local_builder(max_workers=2), psutil.Process()
    first = builder.build(inputs)
    workers = {p.pid for p in me.children()}
    second = builder.build(inputs)
    assert all(r.error_msg is None and os.path.exists(r.artifact_path) for r in first + second)
    assert workers and {p.pid for p in me.children()} == workers

    timed_out = local_builder(timeout_sec=0.001).build(inputs)  # no build takes less
    assert [r.error_msg for r in timed_out] == [
        "LocalBuilder: Timeout, killed after 0.001 seconds"
    ] * 2
    assert timed_out[0].error_msg.startswith(BUILD_TIMEOUT)


def test_cold_seconds_times_a_built_kernel_as_the_tuner_does(cpu_target):
    """The retimed estimate's timer (bench/networks.py): a kernel doing 64x the work of another on
    the same schedule takes several times longer, and the argument infos the tuner records are all
    it needs."""

    def seconds(n):
        func = workloads.make("gemm", "fp32", M=n, N=n, K=n).func
        args = [a.as_json() for a in ArgInfo.from_prim_func(func)]
        return cold_seconds(
            build_candidate(tvm.IRModule({"main": func}), cpu_target, None), args, repeat=5
        )

    small, large = seconds(32), seconds(128)
    assert 0 < small and 4 * small < large < float("inf"), (small, large)
