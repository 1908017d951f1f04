"""The trace walk's state and its handlers for the instructions every design space has.

The walk follows a design space's trace: ``SamplePerfectTile``, ``SampleCategorical`` and
``SampleComputeLocation`` give the variables; ``GetSBlock``/``GetLoops``/``Split``/``Reorder``/
``Fuse`` tell which variables are each loop's extent. What the other instructions mean for the
constraints (parallel jobs, vector lanes, cache stages, thread bindings) is added by the handlers of
:mod:`.cpu`, :mod:`.gpu` and :mod:`.geometry`; :mod:`.derive` holds the table of all of them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from tvm import tirx
from tvm.s_tir import Schedule, Trace
from tvm.target import Target

from ..schedule.analysis import feeds_tensorized
from .model import Constraint, ConstraintModel, Decision, divisors


@dataclass(kw_only=True, frozen=True)
class ConstraintOptions:
    """Which performance constraints to add (validity constraints are always added)."""

    #: Parallel jobs of a parallelized tile loop >= the target's cores (when the space allows).
    parallel_jobs: bool = True
    #: ... and they share out evenly: TVM hands each core a fixed run of jobs, so 3 jobs on 2 cores
    #: leave one core idle a third of the time (a 56x56 conv to 24 channels, MobileNetV2's).
    balanced_jobs: bool = True
    #: ... and they split a tiled block's outermost output axis (a convolution's rows, a GEMM's)
    #: in whole shares per core, so that every kernel of a network gives a core the same rows and
    #: the next kernel reads what that core wrote from its own caches. When the two cores sit on
    #: different core complexes, a kernel reading the other core's half of a 112x112x96 activation
    #: ran 7.6x slower than one reading its own (a Zen 4 VM, 2026-12-03).
    row_affinity: bool = True
    #: Tile buffers of one block fit the per-core L2; BLIS's micro-kernel model: the register
    #: micro-tile fits the vector registers, its panels L1, the cache blocks L2.
    cache_capacity: bool = True
    #: Upper bound on a vectorized loop's extent.
    max_vector_extent: int = 64
    #: A vectorized loop of a tiled block runs a power-of-two number of lanes: LLVM splits a
    #: 48- or 96-lane accumulator into scalar shuffles (a 128x3072x768 GEMM ran 35x slower with
    #: 48 lanes than with 32 on an AVX-512 Xeon), while element-wise loops of any width run alike.
    power_of_two_lanes: bool = True

    def validity_only(self) -> "ConstraintOptions":
        """These options with every performance constraint off."""
        return dataclasses.replace(
            self,
            parallel_jobs=False,
            balanced_jobs=False,
            row_affinity=False,
            cache_capacity=False,
            power_of_two_lanes=False,
        )


@dataclass(kw_only=True)
class Loop:
    """A loop of the trace: the block and iterator it tiles, and the factors of its extent."""

    block: str | None
    iter_index: int | None
    factors: tuple  # variable names or ints; their product is the loop's extent
    parts: tuple = ()  # a fused loop's constituent loops
    thread: str = ""  # the thread axis the loop (or the fused loop holding it) is bound to

    def constituents(self) -> tuple:
        return self.parts or (self,)


@dataclass
class Kernel:
    """What a GPU kernel's tiled block binds: thread-axis extents, and whether a warp runs each
    thread."""

    threads: dict = field(default_factory=dict)  # axis -> factors
    warp_lanes: bool = False


@dataclass(kw_only=True)
class Walk:
    """What the walk knows so far; every handler reads and extends it."""

    space: Schedule
    trace: Trace  # the space's trace without postprocessing
    target: Target
    options: ConstraintOptions
    model: ConstraintModel = field(default_factory=ConstraintModel)
    loops: dict = field(default_factory=dict)  # LoopRV -> Loop
    blocks: dict = field(default_factory=dict)  # SBlockRV -> block name
    # block name -> its tiled loops in order, once reordered
    nest: dict = field(default_factory=dict)
    sampled: dict = field(default_factory=dict)  # ExprRV -> variable name
    kernels: dict = field(default_factory=dict)  # tiled block name -> Kernel (GPU)
    # cooperative-fetch stage -> its vector-width choice
    fetch_vectors: dict = field(default_factory=dict)
    counter: int = 0

    def fresh(self, prefix: str) -> str:
        """A variable name not used before in this model."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    def block_name(self, block_rv) -> str | None:
        return self.blocks.get(block_rv) or block_name(self.space, block_rv)


def block_name(space: Schedule, block_rv) -> str | None:
    try:
        return str(space.get(block_rv).name_hint)
    except Exception:  # pylint: disable=broad-except  # the block was inlined later in the trace
        return None


# -- handlers --------------------------------------------------------------------------------


def on_get_block(walk: Walk, inst) -> None:
    walk.blocks[inst.outputs[0]] = str(inst.attrs[0])


def on_blockize(walk: Walk, inst) -> None:
    walk.blocks[inst.outputs[0]] = block_name(walk.space, inst.outputs[0])


def on_get_loops(walk: Walk, inst) -> None:
    name = walk.blocks.get(inst.inputs[0])
    known = walk.nest.get(name)
    outs = list(inst.outputs)
    for pos, rv in enumerate(outs):
        if known is not None and pos >= len(outs) - len(known):
            walk.loops[rv] = known[pos - (len(outs) - len(known))]
        else:
            walk.loops[rv] = Loop(block=name, iter_index=pos, factors=())


def on_sample_perfect_tile(walk: Walk, inst) -> None:
    model = walk.model
    extent = math.prod(int(x) for x in walk.trace.decisions[inst])
    n, max_inner = int(inst.attrs[0]), int(inst.attrs[1])
    names = [walk.fresh("tile") for _ in range(n)]
    for name in names:
        model.new_var(name, divisors(extent))
    for rv, name in zip(inst.outputs, names):
        walk.sampled[rv] = name
    decision = Decision(inst=inst, kind="tile", variables=tuple(names), extent=extent)
    model.add_decision(decision)
    _add_split(model, decision, max_inner)


def on_sample_categorical(walk: Walk, inst) -> None:
    walk.sampled[inst.outputs[0]] = walk.fresh("choice")
    _add_categorical(
        walk.model,
        inst,
        "categorical",
        tuple(int(c) for c in inst.attrs[0]),
        walk.sampled[inst.outputs[0]],
    )


def on_sample_compute_location(walk: Walk, inst) -> None:
    name = walk.block_name(inst.inputs[0])
    _add_categorical(
        walk.model, inst, "location", _location_candidates(walk.space, name), walk.fresh("location")
    )


def on_split(walk: Walk, inst) -> None:
    ins = list(inst.inputs)
    parent = walk.loops.get(ins[0], Loop(block=None, iter_index=None, factors=()))
    for rv, factor in zip(inst.outputs, ins[1:]):
        term = walk.sampled.get(
            factor, int(factor) if isinstance(factor, (int, tirx.IntImm)) else None
        )
        walk.loops[rv] = Loop(
            block=parent.block,
            iter_index=parent.iter_index,
            factors=(term,) if term is not None else (),
        )


def on_reorder(walk: Walk, inst) -> None:
    ordered = [walk.loops.get(rv) for rv in inst.inputs]
    if ordered and None not in ordered and all(lp.block == ordered[0].block for lp in ordered):
        walk.nest[ordered[0].block] = ordered


def on_fuse(walk: Walk, inst) -> None:
    parts = [
        walk.loops.get(rv, Loop(block=None, iter_index=None, factors=())) for rv in inst.inputs
    ]
    known = all(p.factors for p in parts)
    factors = tuple(f for p in parts for f in p.factors) if known else ()
    walk.loops[inst.outputs[0]] = Loop(
        block=parts[0].block,
        iter_index=None,
        factors=factors,
        parts=tuple(c for p in parts for c in p.constituents()),
    )


HANDLERS = {
    "GetSBlock": on_get_block,
    "Blockize": on_blockize,
    "GetLoops": on_get_loops,
    "SamplePerfectTile": on_sample_perfect_tile,
    "SampleCategorical": on_sample_categorical,
    "SampleComputeLocation": on_sample_compute_location,
    "Split": on_split,
    "Reorder": on_reorder,
    "Fuse": on_fuse,
}


# -- the constraints of a sampled decision -----------------------------------------------------


def _add_categorical(model: ConstraintModel, inst, kind: str, cands: tuple, name: str) -> None:
    """One variable: the index of the chosen candidate."""
    model.new_var(name, lo=0, hi=len(cands) - 1)
    model.add_decision(Decision(inst=inst, kind=kind, variables=(name,), candidates=cands))
    model.add(
        Constraint(
            name=f"{name} in candidates {cands}",
            kind="candidates",
            holds=lambda v, n=name, k=len(cands): 0 <= v[n] < k,
        )
    )


def _location_candidates(space: Schedule, block: str | None) -> tuple[int, ...]:
    """What ``SampleComputeLocation`` may pick for ``block``: inline (-2), root (-1), or a loop of
    its consumer by position.

    TVM's own candidate list (``CollectComputeLocation``) also drops unit loops and loops after the
    first reduction, which depend on the sampled tiles; this is its superset, and TVM maps a
    position it rejects to the next valid one further out when the program is replayed (``replay``
    reads the normalized decision back). Inline is left out where a consumer is tensorized: the
    intrinsic must read the block's buffer (a padded weight's packed copy), not the expression that
    fills it. So are the loops from the first one a rule vectorized inward: a block placed there is
    vectorized with its consumer, and TVM's vectorizer miscompiles a nested block with a branch (a
    concatenation feeding a blocked transpose came out wrong at every such position).
    """
    try:
        rv = space.get_sblock(block)
        consumers = space.get_consumers(rv)
        depth = max((_scalar_depth(space, c) for c in consumers), default=0)
        inline = () if feeds_tensorized(space, rv) else (-2,)
    except Exception:  # pylint: disable=broad-except  # inlined in this space: no loops to name
        depth = max(
            (_scalar_depth(space, b) for b in space.get_child_blocks(space.get_sblock("root"))),
            default=0,
        )
        inline = (-2,)
    return (*inline, -1, *range(depth))


def _scalar_depth(space: Schedule, block) -> int:
    """How many of ``block``'s loops, outermost first, come before the first vectorized one."""
    loops = space.get_loops(block)
    kinds = [space.get(loop).kind for loop in loops]
    return kinds.index(tirx.ForKind.VECTORIZED) if tirx.ForKind.VECTORIZED in kinds else len(loops)


def _add_split(model: ConstraintModel, decision: Decision, max_inner: int) -> None:
    names, extent = decision.variables, decision.extent
    product = model.product(f"{names[0]}..{names[-1]}", list(names), extent)
    if isinstance(product, int):
        return
    model.cp.Add(product == extent)
    label = " * ".join(names)
    model.add(
        Constraint(
            name=f"split {label} == {extent}",
            kind="split",
            holds=lambda v, ns=names, e=extent: math.prod(v[n] for n in ns) == e,
        )
    )
    if max_inner > 0:
        model.cp.Add(model.vars[names[-1]] <= max_inner)
        model.add(
            Constraint(
                name=f"split innermost {names[-1]} <= {max_inner}",
                kind="split",
                holds=lambda v, n=names[-1], m=max_inner: v[n] <= m,
            )
        )
