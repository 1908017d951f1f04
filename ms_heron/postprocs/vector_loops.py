"""Reject programs that put a block inside a loop a rule vectorized."""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import Schedule

from ..schedule import unchecked
from ..schedule.options import heron_object
from .base import HeronPostproc


def blocks_in_vector_loops(sch: Schedule) -> list[str]:
    """The vectorized loops (by variable name) that hold more than one block."""
    found = []
    for block in unchecked.get_child_blocks(sch, unchecked.get_sblock(sch, "root")):
        for loop in unchecked.get_loops(sch, block):
            stmt = unchecked.get(sch, loop)
            if (
                stmt.kind == tirx.ForKind.VECTORIZED
                and len(unchecked.get_child_blocks(sch, loop)) > 1
            ):
                found.append(stmt.loop_var.name)
    return sorted(set(found))


@heron_object
class DisallowBlocksInVectorLoops(HeronPostproc):
    """Refuse a program in which a vectorized loop holds more than one block. Some rules vectorize
    their block's innermost loop themselves (a blocked transpose's write tile), and a producer's
    sampled compute location may then lie inside it; TVM's vectorizer miscompiles such a nested
    block with a branch (a concatenation feeding a blocked transpose computed wrong values).
    HeronSearch's constraint model never picks those locations; this catches the searches that
    mutate them freely (MetaSchedule's evolutionary search over HeronSpace)."""

    def apply(self, sch: Schedule) -> bool:
        return not blocks_in_vector_loops(sch)
