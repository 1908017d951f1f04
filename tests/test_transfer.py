"""Transfer between tasks: a tuned task's best program seeds the next task of the same structure."""

import math

from conftest import HOST_DTYPE
from rule_helpers import started_search
from tvm.s_tir.meta_schedule.runner import RunnerResult

from ms_heron import HeronSearch, workloads
from ms_heron.search.transfer import Donors, donation
from ms_heron.workloads.evaluate import build, run_and_check, time_lib


def _task(workload, strategy, name, target):
    return started_search(
        workload.func,
        target,
        trials=16,
        per_round=8,
        strategy=strategy,
        task_name=name,
        rand_state=1,
    )


def test_a_second_conv_shape_measures_the_projection_of_the_first_shapes_best_first(cpu_target):
    """Two 3x3 convolutions of one stage's channels at two image sizes (one HeronSearch's clones, as
    a model's tasks are): the second's first round leads with the first's best program, projected:
    its inner tile factors and chosen candidates kept wherever they fit the new extents, and it
    computes the right result."""
    conv = dict(N=1, CI=16, CO=32, KH=3, KW=3, stride=1, pad=1)
    first, second = (workloads.make("c2d", HOST_DTYPE, H=size, W=size, **conv) for size in (8, 14))
    # its Python clone(), the one MetaSchedule's TuneContext.clone() calls
    prototype = HeronSearch()._inst
    donor = _task(first, prototype.clone(), "first", cpu_target)
    batch = donor.generate_measure_candidates()
    seconds = [
        time_lib(build(c.sch.mod, cpu_target), first, repeat=3, min_repeat_ms=5).seconds
        for c in batch
    ]
    donor.notify_runner_results(
        batch, [RunnerResult(run_secs=[s], error_msg=None) for s in seconds]
    )

    taker = _task(second, prototype.clone(), "second", cpu_target)
    taker.generate_measure_candidates()
    # The first pick is a projection (they alternate with the analytical choices): of the donor's
    # fastest program among the design spaces of the same structure.
    lead = taker.pending[0]
    donated = [
        (s, p)
        for s, p in zip(seconds, donor.pending)
        if donor.signatures[p.space] == taker.signatures[lead.space]
    ]
    best = min(donated, key=lambda sp: sp[0])[1]
    model = taker.models[lead.space]
    wanted, got = donation(donor.models[best.space], best.values), donation(model, lead.values)
    kept = 0
    for decision, want, have in zip(model.decisions, wanted, got):
        # kept wherever it fits, unless all of them together conflict with the new model (then
        # hints)
        if decision.kind == "tile" and decision.extent % math.prod(want[1:]) == 0:
            kept += have[1:] == want[1:]
        elif decision.kind != "tile" and want in decision.candidates:
            kept += have == want
    assert kept >= len(model.decisions) // 2, (wanted, got)
    # valid: it builds and computes the conv
    run_and_check(build(lead.candidate.sch.mod, cpu_target), second)


def test_donors_give_other_tasks_best_programs_newest_donor_first():
    donors = Donors()
    donors.donate("conv", "a", 2.0, ("a-slow",))
    donors.donate("conv", "a", 1.0, ("a-fast",))
    donors.donate("conv", "b", 5.0, ("b",))
    # not a's best: kept out, but a is now the newest donor
    donors.donate("conv", "a", 3.0, ("a-slower",))
    donors.donate("matmul", "c", 1.0, ("c",))
    assert donors.for_task("conv", "z", 4) == [("a-fast",), ("b",)]
    assert donors.for_task("conv", "a", 4) == [("b",)]  # never its own program
    assert donors.for_task("conv", "z", 1) == [("a-fast",)]
    assert donors.for_task("depthwise", "z", 4) == []


def test_donors_nearest_in_extents_come_first_the_newest_among_equals():
    donors = Donors()
    # (tile of 2 factors, a choice): extents 64 and 8
    donors.donate("conv", "wide", 1.0, ((16, 4), 2))
    donors.donate("conv", "narrow", 1.0, ((2, 4), 2))
    assert donors.for_task("conv", "z", 2, extents=(8, 0)) == [((2, 4), 2), ((16, 4), 2)]
    assert donors.for_task("conv", "z", 2, extents=(56, 0)) == [((16, 4), 2), ((2, 4), 2)]
    assert donors.for_task("conv", "z", 2) == [((2, 4), 2), ((16, 4), 2)]  # newest
