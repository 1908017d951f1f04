"""The ``ms-heron`` command as a user runs it (subprocess)."""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest
import tvm
from conftest import HOST_DOT, HOST_DTYPE, ms_heron_cli

import ms_heron
from ms_heron import workloads
from ms_heron.cli import _parser
from ms_heron.cli.common import DEFAULT_TRIALS, trials_and_budget, trials_done
from ms_heron.hardware.targets import host_target, num_cores
from ms_heron.records import json_lines, measured_seconds
from ms_heron.tuning import TuningRun, workdir
from ms_heron.tuning.budget import BUDGET_BOUND_TRIALS, LATE_ROUND


def test_demo_rejects_old_target_string():
    proc = ms_heron_cli("demo", "--target", "llvm -mcpu=znver4")
    assert proc.returncode == 2
    assert "old CLI form" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_demo_rejects_int8_on_a_cpu_without_avx2():
    target = json.dumps({"kind": "llvm", "mcpu": "x86-64", "num-cores": 2})
    proc = ms_heron_cli("demo", "--target", target, "--trials", "2", "--dtype", "int8")
    assert proc.returncode == 2
    assert (
        "'x86-64' has none; use an mcpu such as 'haswell'" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_demo_rejects_a_shape_the_dot_product_cannot_take():
    proc = ms_heron_cli("demo", "--shape", "64", "1", "2", "--dtype", "int8")
    assert proc.returncode == 2
    assert f"nearest that is: N={HOST_DOT.lanes}" in proc.stderr


# -- ms-heron tune / report / show -------------------------------------------------------------

SMALL_GEMM = ("gemm", "--shape", "M=64", "N=64", "K=64")


@pytest.fixture(scope="module")
def _tuned_once(tmp_path_factory):
    work = tmp_path_factory.mktemp("four_trials")
    proc = ms_heron_cli("tune", *SMALL_GEMM, "--trials", "4", "--work-dir", str(work))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work


@pytest.fixture
def four_trial_run(_tuned_once, tmp_path):
    """A finished ``tune`` of SMALL_GEMM with 4 trials in this test's own work dir (tuned once per
    worker and copied: each tune is a subprocess that costs seconds)."""
    shutil.copytree(_tuned_once, tmp_path, dirs_exist_ok=True)
    return tmp_path


def _trace_lines(work_dir):
    """The trace part of every record, in the order stored."""
    return [json.dumps(line[1][0]) for line in json_lines(work_dir / "database_tuning_record.json")]


def test_tune_resume_report_show(tmp_path):
    work = tmp_path / "run"
    proc = ms_heron_cli(
        "tune",
        *SMALL_GEMM,
        "--trials",
        "4",
        "--round-size",
        "4",
        "--work-dir",
        str(work),
        "--baseline",
        "metaschedule",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(
        r"ms_heron:\s+4/4 trials \| best [\d.]+ ms = [\d.]+ GOPS \| valid 100%", proc.stdout
    ), proc.stdout
    assert (
        re.search(r"speed-up\s+[\d.]+x", proc.stdout)
        and "MetaSchedule default:    4/4 trials" in proc.stdout
    ), proc.stdout
    assert len(_trace_lines(work)) == 4 and len(_trace_lines(work / "baseline")) == 4
    assert (
        "best kernel of ms_heron and MetaSchedule default checked against the reference: correct"
        in proc.stdout
    )

    again = ms_heron_cli(
        "tune", *SMALL_GEMM, "--trials", "8", "--round-size", "4", "--work-dir", str(work)
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from 4 records" in again.stdout and "8/8 trials" in again.stdout
    traces = _trace_lines(work)
    assert len(traces) == 8 and len(set(traces)) == 8  # nothing measured twice
    log = "".join(p.read_text() for p in (work / "logs").glob("*task*"))
    assert "warm start: 4 of 4 earlier records" in log

    report = ms_heron_cli("report", str(work))
    assert report.returncode == 0, report.stderr[-3000:]
    png = (work / "tuning_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    text = (work / "report.md").read_text()
    assert "| trials | 8 | 4 |" in text and "% of measured" in text and "unconstrained size" in text

    show = ms_heron_cli("show", str(work))
    assert show.returncode == 0, show.stderr[-3000:]
    assert "sch.sample_perfect_tile" in show.stdout
    # dot product or AMX
    int8_instruction = re.search(r"T\.call_llvm_pure_intrin|llvm\.x86\.tdpbusd", show.stdout)
    assert HOST_DTYPE != "int8" or int8_instruction


def test_a_spent_time_budget_measures_only_until_the_first_valid_candidate(tmp_path):
    """Set-up alone outlasts a 1 s budget: the first round is cut to a few candidates, built and
    measured (the faster kept), and nothing else is tuned."""
    # 256^3, not the 2 us 64^3 GEMM: TVM's timer sizes its loop from one fast call (~40,000 calls
    # for 100 ms), and when the suite's other worker holds the cores every call of a 2-thread kernel
    # waits for its second thread, so timing that one candidate outlasted the budget's 10 s timeout.
    proc = ms_heron_cli(
        "tune",
        *("gemm", "--shape", "M=256", "N=256", "K=256"),
        *(
            "--trials",
            "40",
            "--round-size",
            "4",
            "--time-budget",
            "1s",
            "--work-dir",
            str(tmp_path),
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seconds = measured_seconds(tmp_path)
    assert len(seconds) == LATE_ROUND and min(seconds) < float("inf"), seconds
    (log,) = (tmp_path / "logs").glob("*task_scheduler.log")
    built = [int(n) for n in re.findall(r"Sending (\d+) sample\(s\) to builder", log.read_text())]
    assert built == [LATE_ROUND], built


def _tune_until(tmp_path, trials_line):
    """A ``tune`` of 40 trials in rounds of 4, returned once it printed ``trials_line``."""
    cmd = [
        sys.executable,
        "-m",
        "ms_heron.cli",
        "tune",
        *SMALL_GEMM,
        "--trials",
        "40",
        "--round-size",
        "4",
        "--work-dir",
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    for line in proc.stdout:
        if re.search(rf"\b{trials_line}/40 trials", line):
            return proc
    raise AssertionError(proc.stderr.read()[-3000:])


def test_killed_run_loses_at_most_the_round_in_flight_and_resumes(tmp_path):
    proc = _tune_until(tmp_path, 8)  # progress lines arrive once a round is stored
    os.killpg(proc.pid, signal.SIGKILL)  # the whole job, its builder and runner workers too
    proc.wait()
    kept = len(_trace_lines(tmp_path))
    assert 4 <= kept < 40  # the round just reported may still have been on its way to the database
    again = ms_heron_cli(
        "tune", *SMALL_GEMM, "--trials", kept + 4, "--round-size", "4", "--work-dir", str(tmp_path)
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {kept} records" in again.stdout
    assert len(_trace_lines(tmp_path)) == kept + 4


def test_ctrl_c_stops_after_the_round_in_flight_and_a_second_one_at_once(tmp_path):
    proc = _tune_until(tmp_path, 8)
    # as a terminal sends it: to the builder and runner workers too
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert "stopping after the round in flight (CTRL-C again to stop now)" in err
    assert "interrupted: every measured record is stored" in out
    kept = len(_trace_lines(tmp_path))
    # whole rounds: the one in flight finished and was stored
    assert 8 <= kept < 40 and kept % 4 == 0
    assert (tmp_path / "database_tuning_record.json").read_text().endswith("\n")

    proc = _tune_until(tmp_path, kept + 4)
    os.killpg(proc.pid, signal.SIGINT)
    # the second is sent once the first was taken (a SIGINT still pending absorbs another), while
    # the round that had just begun is in flight
    for line in proc.stderr:
        if "stopping after the round in flight" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (
        proc.returncode == 130
        and "stopped; the records stored in" in err
        and "Traceback" not in err
    ), err
    now = len(_trace_lines(tmp_path))
    assert now >= kept + 4
    again = ms_heron_cli(
        "tune", *SMALL_GEMM, "--trials", now + 4, "--round-size", "4", "--work-dir", str(tmp_path)
    )
    assert again.returncode == 0 and f"resuming from {now} records" in again.stdout, again.stderr[
        -3000:
    ]
    assert len(_trace_lines(tmp_path)) == now + 4


@pytest.mark.usefixtures("four_trial_run")
def test_torn_last_record_is_left_by_show_and_cut_on_resume(tmp_path):
    """A kill inside a write leaves half a line: show and report read around it without writing the
    database (byte-identical beside a live run); the next tune cuts it and goes on."""
    records = tmp_path / "database_tuning_record.json"
    records.write_text(records.read_text() + '[0, [[["GetSBlock", [], ["C"')
    before = records.read_bytes()
    for command in ("show", "report"):
        proc = ms_heron_cli(command, str(tmp_path))
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert records.read_bytes() == before
    again = ms_heron_cli(
        "tune", *SMALL_GEMM, "--trials", "8", "--round-size", "4", "--work-dir", str(tmp_path)
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from 4 records" in again.stdout and len(_trace_lines(tmp_path)) == 8


@pytest.mark.usefixtures("four_trial_run")
def test_second_process_on_a_live_work_dir_is_refused_naming_the_holder(tmp_path):
    with workdir.work_dir_lock(tmp_path):  # this process is the live run
        proc = ms_heron_cli("tune", *SMALL_GEMM, "--trials", "8", "--work-dir", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        f"work dir {tmp_path} is being tuned by process {os.getpid()}; wait for it to finish"
        in proc.stderr
    )
    assert len(_trace_lines(tmp_path)) == 4


def test_resume_with_another_target_is_refused_naming_both(tmp_path):
    workload = workloads.make("gemm", "fp32", M=8, N=16, K=8)
    TuningRun.create(tmp_path, workdir.RunSpec.of(workload, host_target(), seed=0))
    cores = num_cores(host_target())
    other = host_target(num_cores=cores + 1)
    with pytest.raises(
        workdir.RunError,
        match=rf'records measured for target \{{.*"num-cores": {cores}.*\}}, not '
        rf'\{{.*"num-cores": {cores + 1}.*\}}; timings on one target do not rank kernels for '
        r"another",
    ):
        TuningRun.create(tmp_path, workdir.RunSpec.of(workload, other, seed=0))
    run_file = json.loads((tmp_path / workdir.RUN_FILE).read_text())
    assert (
        run_file["versions"]["tvm"] == tvm.__version__
        and run_file["versions"]["ms_heron"] == ms_heron.__version__
    )


@pytest.mark.usefixtures("four_trial_run")
def test_corrupt_middle_record_is_skipped_with_a_warning_naming_its_line(tmp_path):
    records = tmp_path / "database_tuning_record.json"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join([*lines[:2], "{not json\n", *lines[2:]]))
    with pytest.warns(
        UserWarning, match=r"database_tuning_record.json:3 is not a JSON record and is skipped"
    ):
        seconds = measured_seconds(tmp_path)
    assert len(seconds) == 4 and all(s < float("inf") for s in seconds)


@pytest.mark.parametrize(
    "args,message",
    [
        (("tune", "gemx.G1"), "unknown case 'gemx.G1'"),
        (
            ("tune", "gemm", "--shape", "M=64", "N=1", "K=2", "--dtype", "int8"),
            f"nearest that is: N={HOST_DOT.lanes}",
        ),
        (("tune", "gemm.G1", "--target", "llvm -mcpu=znver4"), "old CLI form"),
        (("tune", "gemm", "--shape", "M64"), "NAME=INT"),
        (("tune", "gemm.G1", "--time-budget", "soon"), "duration such as 90s"),
        (("tune", "gemm.G1", "--trials", "0"), "--trials and --round-size must be at least 1"),
        (("tune", "gemm.G1", "--target", "{bad"), "is not a target dict"),
        (("tune", "gemm.G1", "--rpc", "tracker"), "--rpc takes HOST:PORT:KEY"),
        (("report", "/nonexistent/run"), "holds no ms-heron run"),
    ],
)
def test_bad_input_gets_one_line_naming_the_fix(args, message, tmp_path):
    proc = ms_heron_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # refused before the default work dir (ms_heron_runs/...) is made
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", [("tune", "gemm.G1"), ("tune-model", "model.onnx")])
def test_a_time_budget_alone_ends_tuning_by_time_not_by_a_default_count(command):
    """Given only ``--time-budget``, a run tunes until the budget ends: with the default 200
    records, ViT's 17 tasks stopped after 2 of the 6 minutes asked for. ``--trials`` counts as
    given, with a budget or without; the progress line then shows no total."""
    parse = _parser().parse_args
    assert trials_and_budget(parse([*command, "--time-budget", "6m"])) == (
        BUDGET_BOUND_TRIALS,
        360.0,
    )
    assert trials_and_budget(parse([*command])) == (DEFAULT_TRIALS, None)
    assert trials_and_budget(parse([*command, "--trials", "50", "--time-budget", "90s"])) == (
        50,
        90.0,
    )
    assert trials_done(7, BUDGET_BOUND_TRIALS).strip() == "7 trials"
    assert trials_done(7, 50).strip() == "7/50 trials"


def test_a_malformed_run_file_gets_one_line(tmp_path):
    (tmp_path / workdir.RUN_FILE).write_text('{"family": "gemm", "dty')
    for command in ("report", "show"):
        proc = ms_heron_cli(command, str(tmp_path))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[
            -2000:
        ]
        assert f"{tmp_path / workdir.RUN_FILE} is not an ms-heron run file (" in proc.stderr


@pytest.mark.usefixtures("four_trial_run")
def test_work_dir_of_another_workload_or_unwritable_is_refused(tmp_path):
    other = ms_heron_cli(
        "tune",
        "bmm",
        "--shape",
        "B=2",
        "M=8",
        "N=16",
        "K=8",
        "--trials",
        "2",
        "--work-dir",
        str(tmp_path),
    )
    assert (
        other.returncode == 2 and f"holds a run of gemm M=64 N=64 K=64 {HOST_DTYPE}" in other.stderr
    )
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    unwritable = ms_heron_cli("tune", *SMALL_GEMM, "--work-dir", str(blocker / "run"))
    assert unwritable.returncode == 2 and "choose a writable --work-dir" in unwritable.stderr
    assert "Traceback" not in other.stderr + unwritable.stderr


KERNEL = (pathlib.Path(__file__).parent / "row_scale_kernel.py").read_text()


def test_a_users_tvmscript_kernel_is_a_run_with_resume_and_show(tmp_path):
    """``ms-heron tune kernel.py``: the run file keeps the kernel's TVMScript, so resume and show
    need nothing but the work dir; the same work dir refuses another kernel or workload."""
    source = tmp_path / "kernel.py"
    source.write_text(KERNEL)
    work = tmp_path / "run"
    proc = ms_heron_cli(
        "tune", f"{source}:row_scale", "--trials", "3", "--round-size", "3", "--work-dir", str(work)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernel row_scale (fp32)" in proc.stdout and re.search(
        r"ms_heron:\s+3/3 trials", proc.stdout
    ), proc.stdout
    assert "row_scale" in json.loads((work / "ms_heron_run.json").read_text())["kernel"]
    source.unlink()  # the work dir alone carries the run from here
    show = ms_heron_cli("show", str(work))
    assert show.returncode == 0, show.stderr[-2000:]
    assert 'T.sblock("scale")' in show.stdout and "sch.get_sblock" in show.stdout
    other = ms_heron_cli("tune", *SMALL_GEMM, "--trials", "2", "--work-dir", str(work))
    assert other.returncode == 2 and "holds a run of kernel row_scale (fp32)" in other.stderr


def test_kernel_file_errors_name_the_fix(tmp_path):
    source = tmp_path / "kernel.py"
    source.write_text(KERNEL)
    missing = ms_heron_cli("tune", f"{source}:nope")
    assert (
        missing.returncode == 2
        and "defines no PrimFunc named 'nope'; it defines: row_scale" in missing.stderr
    )
    absent = ms_heron_cli("tune", str(tmp_path / "absent.py"))
    assert (
        absent.returncode == 2
        and "no such file" in absent.stderr
        and "Traceback" not in absent.stderr
    )
    broken = tmp_path / "broken.py"
    broken.write_text(KERNEL.replace("@T.prim_func(s_tir=True)", "@T.prim_func"))
    proc = ms_heron_cli("tune", broken)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert f"{broken} does not load (" in proc.stderr and "@T.prim_func(s_tir=True)" in proc.stderr


@pytest.mark.usefixtures("four_trial_run")
def test_resume_sets_a_corrupt_middle_record_aside_and_keeps_every_good_one(tmp_path):
    records = tmp_path / "database_tuning_record.json"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join([*lines[:2], "{not json\n", *lines[2:]]))
    proc = ms_heron_cli(
        "tune", *SMALL_GEMM, "--trials", "6", "--round-size", "2", "--work-dir", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "database_tuning_record.json:3 is not a tuning record and was set aside in "
        "database_tuning_record.rejected" in proc.stderr
    )
    kept = records.read_text().splitlines(keepends=True)
    assert kept[:4] == lines and len(kept) == 6  # the good records byte for byte, then the new ones
    assert (tmp_path / "database_tuning_record.rejected").read_text() == "3\t{not json\n"


#: The ``ms-heron`` command with a file-size limit (``ulimit -f``): every write past ``limit`` bytes
#: fails with EFBIG, as on a disk that just filled up.
LIMITED_CLI = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.argv = ["ms-heron", *sys.argv[2:]]
runpy.run_module("ms_heron.cli", run_name="__main__")
"""


@pytest.mark.usefixtures("four_trial_run")
def test_a_disk_that_fills_up_mid_run_stops_with_one_line_and_keeps_every_record(tmp_path):
    records = tmp_path / "database_tuning_record.json"
    before = records.read_bytes()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            LIMITED_CLI,
            str(len(before) + 100),
            "tune",
            *SMALL_GEMM,
            "--trials",
            "12",
            "--round-size",
            "4",
            "--work-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    # The limit also fails the build workers' object files (LLVM says so on their stderr): only the
    # last line is ms-heron's, and no traceback.
    assert "every record stored before is kept" in proc.stderr.strip().splitlines()[-1], (
        proc.stderr[-3000:]
    )
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr[
        -3000:
    ]
    assert records.read_bytes().startswith(before)
    again = ms_heron_cli(
        "tune", *SMALL_GEMM, "--trials", "8", "--round-size", "4", "--work-dir", str(tmp_path)
    )
    assert again.returncode == 0, again.stderr[-3000:]  # space freed: the same command resumes
    assert records.read_bytes().startswith(before) and len(measured_seconds(tmp_path)) == 8
