"""The records store: a task tuned once for a target is not tuned again, in another work dir or
network; its programs are timed again once on this host; records of another target and corrupt
lines are skipped, said in one line."""

import json
import re
import shutil

import onnx
import pytest
import tvm
from conftest import ms_heron_cli
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import ScheduleError

from ms_heron import workloads
from ms_heron.hardware.targets import target_json
from ms_heron.records import (
    DATABASE_FILES,
    commit_copy,
    confirmed_seconds,
    describe_target,
    fastest_per_workload,
    read_records,
    record_seconds,
)
from ms_heron.search.transfer import stored_donation
from ms_heron.testing import models
from ms_heron.tuning import RunSpec, TuningRun
from ms_heron.tuning.store import RecordStore, seed_from
from ms_heron.workloads import Workload, from_func
from ms_heron.workloads.evaluate import build, run_and_check


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, cpu_target):
    """A small conv + dense model tuned once into a store: (store, the run)."""
    root = tmp_path_factory.mktemp("tuned")
    model = models.cnn()
    onnx.save(model.proto, root / "cnn.onnx")
    store = RecordStore(root / "store")
    run = TuningRun.create(
        root / "first", RunSpec.of_model(root / "cnn.onnx", model.input_shapes(), cpu_target, 0)
    )
    run.tune(16, num_trials_per_iter=4, store=store)
    return store, run


def test_a_task_in_the_store_is_not_tuned_again_and_its_kernels_are_timed_again_once(
    tmp_path, tuned
):
    store, first = tuned
    names = [t.name for t in first.tasks]
    directory = store.dir_for(first.target)
    assert (directory / DATABASE_FILES[1]).read_text().count("\n") >= len(names)
    # A new work dir of the same model: every task comes from the store, none is tuned.
    run = TuningRun.create(tmp_path / "second", first.spec)
    said, rounds = [], []
    run.tune(64, num_trials_per_iter=4, store=store, say=said.append, on_round=rounds.append)
    assert (
        f"{len(names)} of {len(names)} tasks were tuned before for this target: their best "
        "programs are timed again here, not tuned (--retune tunes them)"
    ) in said
    assert not any(line.startswith("resuming") for line in said)  # seeded, not resumed
    assert [r.confirmed for r in rounds] == [True]  # no measured round, only the timing again
    timed = confirmed_seconds(run.work_dir)
    assert len(timed) == run.state().trials  # every seeded program, each once
    assert all(t.seconds < float("inf") for t in run.task_times())
    # Run again: nothing new to seed, and nothing is timed a second time.
    run = TuningRun.create(tmp_path / "second", first.spec)
    run.tune(64, num_trials_per_iter=4, store=store)
    lines = (run.work_dir / "confirmed.jsonl").read_text().splitlines()
    assert len(lines) == len(timed)
    # retune: the tasks are tuned although the store holds them
    retuned = []
    run.tune(
        run.state().trials + 4,
        num_trials_per_iter=4,
        store=store,
        retune=True,
        on_round=retuned.append,
    )
    assert any(not r.confirmed for r in retuned)
    # More seeded programs than --trials asks for: none is tuned, all are still timed again.
    few = TuningRun.create(tmp_path / "few", first.spec)
    few.tune(1, store=store)
    assert few.progress()[-1].confirmed and len(confirmed_seconds(few.work_dir)) > 1
    # A work dir that tuned its tasks itself goes on tuning them when it resumes, though the store
    # holds them since (its own programs).
    shutil.copytree(first.work_dir, tmp_path / "resumed")
    resumed = TuningRun.create(tmp_path / "resumed", first.spec)
    more = []
    resumed.tune(
        resumed.state().trials + 4, num_trials_per_iter=4, store=store, on_round=more.append
    )
    assert any(not r.confirmed for r in more)


def test_records_of_another_target_are_skipped_in_one_line(tmp_path, tuned, cpu_target):
    store, first = tuned
    foreign = tmp_path / "haswell"
    shutil.copytree(store.dir_for(first.target), foreign)
    records = foreign / DATABASE_FILES[1]
    lines = records.read_text().splitlines()
    other = {**target_json(first.target), "mcpu": "haswell"}
    rewritten = []
    for line in lines:
        index, (trace, secs, _target, args) = json.loads(line)
        rewritten.append(json.dumps([index, [trace, secs, other, args]]))
    records.write_text("\n".join(rewritten) + "\n")
    seeded = seed_from(ms.database.MemoryDatabase(), first.tasks, cpu_target, [foreign])
    assert seeded.tasks == set() and seeded.added == 0
    assert seeded.lines(len(first.tasks)) == [
        f"skipped {len(lines)} records of {foreign} measured for another target "
        f"({describe_target(other)})"
    ]


def test_a_corrupt_store_line_is_skipped_with_a_warning_and_the_rest_seed(
    tmp_path, tuned, cpu_target
):
    store, first = tuned
    copy = RecordStore(tmp_path / "store")
    shutil.copytree(store.root, copy.root)
    records = copy.dir_for(cpu_target) / DATABASE_FILES[1]
    good = records.read_text().splitlines(keepends=True)
    records.write_text("".join([good[0], "not a record\n", "[99, [1, 2]]\n", *good[1:]]))
    with pytest.warns(UserWarning) as caught:
        seeded = seed_from(
            ms.database.MemoryDatabase(), first.tasks, cpu_target, [copy.dir_for(cpu_target)]
        )
    skipped = [str(w.message) for w in caught]
    assert f"{records}:2 is not a tuning record and is skipped; the other records are kept" in (
        skipped
    )
    assert any(re.match(rf"{re.escape(str(records))}:3 is not a tuning record", m) for m in skipped)
    intact = seed_from(
        ms.database.MemoryDatabase(), first.tasks, cpu_target, [store.dir_for(cpu_target)]
    )
    assert seeded.tasks == {t.name for t in first.tasks} and seeded.added == intact.added > 0
    # the store is still written to: its corrupt lines are set aside, its good ones kept
    with pytest.warns(UserWarning, match="set aside"):
        assert copy.keep(first.database(), first.tasks, cpu_target) == 0


def test_a_second_conv_shape_starts_from_the_stored_first_shapes_best_projected(
    tmp_path, cpu_target
):
    """A convolution tuned into the store; another run tunes a larger one of the same stage's
    kind: its first round holds the stored program projected (every inner tile factor and choice
    kept, as the larger extents allow), and that program computes the convolution."""
    store = RecordStore(tmp_path / "store")
    conv = dict(N=1, KH=3, KW=3, stride=1, pad=1)
    small = workloads.make("c2d", "fp32", H=8, W=8, CI=16, CO=32, **conv)
    large = workloads.make("c2d", "fp32", H=16, W=16, CI=32, CO=64, **conv)
    TuningRun.create(tmp_path / "small", RunSpec.of(small, cpu_target, 0)).tune(
        8, num_trials_per_iter=8, store=store
    )
    (stored,) = fastest_per_workload(read_records(store.dir_for(cpu_target), cpu_target).database)
    signature, wanted = stored_donation(stored.trace)

    run = TuningRun.create(tmp_path / "large", RunSpec.of(large, cpu_target, 0))
    run.tune(4, num_trials_per_iter=4, store=store)
    first_round = [(r, stored_donation(r.trace)) for r in run.database().get_all_tuning_records()]
    projected = [
        r
        for r, (sig, got) in first_round
        if sig == signature
        and all(
            have == want if not isinstance(want, tuple) else have[1:] == want[1:]
            for have, want in zip(got, wanted)
        )
    ]
    assert projected, "no program of the first round is the stored one projected"
    assert record_seconds(projected[0].run_secs) < float("inf")
    sch = tvm.s_tir.Schedule(large.func)
    projected[0].trace.apply_to_schedule(sch, remove_postproc=False)
    run_and_check(build(sch.mod, cpu_target), large)
    logs = "".join(p.read_text() for p in (run.work_dir / "logs").iterdir())
    assert "round 0 starts with" in logs and "projected from tasks tuned before" in logs


def _global_mean(name: str) -> Workload:
    """A global average pool as Relax names it: the reduction's block after its input variable
    (``lv378_red`` in ResNet-50, ``lv752_red`` in ResNet-101)."""
    x = te.placeholder((1, 7, 7, 64), "float32", name=name)
    k1, k2 = te.reduce_axis((0, 7), name="k1"), te.reduce_axis((0, 7), name="k2")
    red = te.compute(
        (1, 1, 1, 64), lambda n, i, j, c: te.sum(x[n, k1, k2, c], axis=[k1, k2]), name=f"{name}_red"
    )
    out = te.compute(red.shape, lambda *i: red(*i) / 49.0, name="T_divide")
    return from_func(te.create_prim_func([x, out]), "mean")


def test_a_stored_program_seeds_a_kernel_whose_blocks_another_model_named(cpu_target):
    """A record matches a task by structure, but its trace finds blocks by name: ResNet-101 warm
    from ResNet-50's records stopped at its first timing, its pooling's trace asking for
    ResNet-50's ``lv378_red``. Copied into a database as the other kernel's record, the trace gets
    that kernel's names, those derived from them too (a cache stage of buffer ``lv378``), keeps
    its layout change and builds into the right result."""
    stored, task = _global_mean("lv378"), _global_mean("lv752")
    sch = Schedule(stored.func)
    cached = sch.get(sch.cache_read(sch.get_sblock("lv378_red"), 0, "global")).name_hint
    sch.transform_layout(
        sch.get_sblock("lv378_red"), ("write", 0), lambda n, i, j, c: (n, i, j, c // 16, c % 16)
    )
    sch.vectorize(sch.get_loops(sch.get_sblock(cached))[-1])
    record = ms.database.TuningRecord(
        sch.trace,
        ms.database.Workload(tvm.IRModule({"main": stored.func})),
        [1e-3],
        cpu_target,
        ms.arg_info.ArgInfo.from_prim_func(stored.func),
    )
    mod = tvm.IRModule({"main": task.func})
    as_it_was = ms.database.TuningRecord(record.trace, ms.database.Workload(mod), [1e-3])
    with pytest.raises(ScheduleError, match="lv378_red"):
        as_it_was.as_measure_candidate()
    database = ms.database.MemoryDatabase()
    assert commit_copy(database, mod, record)
    (copy,) = database.get_top_k(database.commit_workload(mod), 2)
    assert "lv378" not in str(copy.trace)
    assert 'name="lv752_red"' in str(copy.trace) and 'name="lv752_global"' in str(copy.trace)
    copied = copy.as_measure_candidate().sch.mod
    assert "T.vectorized" in copied.script()
    run_and_check(build(copied, cpu_target), task)


def test_the_warm_path_through_the_command(tmp_path):
    """Two networks of one model file, as the README shows: the second run tunes nothing."""
    model = models.mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model.proto, path)
    store = tmp_path / "store"
    common = ("--trials", 8, "--round-size", 4, "--store", store)
    first = ms_heron_cli("tune-model", path, "--work-dir", tmp_path / "a", *common)
    assert first.returncode == 0, first.stderr[-3000:]
    assert re.search(r"kept \d+ programs in the records store", first.stdout), first.stdout
    second = ms_heron_cli("tune-model", path, "--work-dir", tmp_path / "b", *common)
    assert second.returncode == 0, second.stderr[-3000:]
    assert re.search(r"ms_heron: (\d+) of \1 tasks were tuned before", second.stdout)
    assert " trials | task " not in second.stdout
    assert "outputs checked against" in second.stdout
    cold = ms_heron_cli("tune-model", path, "--work-dir", tmp_path / "c", *common, "--no-store")
    assert cold.returncode == 0 and " trials | task " in cold.stdout, cold.stderr[-3000:]
