"""HeronSpace: Heron's generation rules applied in post order, as a MetaSchedule space generator."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from tvm import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.mutator import Mutator
from tvm.s_tir.meta_schedule.postproc import Postproc
from tvm.s_tir.meta_schedule.schedule_rule import ScheduleRule
from tvm.s_tir.meta_schedule.space_generator import PySpaceGenerator, SpaceGenerator
from tvm.s_tir.schedule.analysis import has_block
from tvm.target import Target
from tvm.tirx import PrimFunc

from .hardware.targets import is_cuda
from .intrinsics import ensure_registered, import_x86_intrinsics
from .postprocs import (
    DisallowBlocksInVectorLoops,
    FuseTileInit,
    PackPanels,
    UnrollTiles,
    VectorizeTileInit,
)
from .rules import default_rules
from .schedule.analysis import needs_sampled_location
from .schedule.annotations import METASCHEDULE_SPACE, SPACE_ORIGIN
from .schedule.options import check


def default_postprocs(target=None) -> list:
    """TVM's postprocs that finish what the rules leave as annotations (CPU when ``target`` is
    None).

    On CUDA they also bind cooperative fetches and leftover blocks to threads and reject kernels
    that break the GPU's limits (VerifyGPUCode) -- the check Heron's constraints make pass.
    """
    if target is not None and is_cuda(target):
        return [
            ms.postproc.DisallowDynamicLoop(),
            ms.postproc.RewriteCooperativeFetch(),
            ms.postproc.RewriteUnboundBlock(),
            ms.postproc.RewriteParallelVectorizeUnroll(),
            ms.postproc.RewriteReductionBlock(),
            ms.postproc.VerifyGPUCode(),
            ms.postproc.RewriteTensorize(),
        ]
    return [
        ms.postproc.DisallowDynamicLoop(),
        # before the reduction is decomposed: it finds the streamed input on the block
        PackPanels(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        UnrollTiles(),  # after: the parallel rewrite fuses outer loops, never unrolled ones
        DisallowBlocksInVectorLoops(),  # before the reduction's init block joins its update's loops
        ms.postproc.RewriteReductionBlock(),
        VectorizeTileInit(),  # AMX's 32 x 32 accumulator: RewriteTensorize vectorizes one loop only
        ms.postproc.RewriteTensorize(vectorize_init_loop=True),
        FuseTileInit(),  # an init over many micro-tiles: one loop, not a nest LLVM unrolls whole
        # Layout-free weights (a model's constants) get the layout the tiled kernel streams: packed
        # panels. The re-layout is dropped when measuring and folded into the constant at compile
        # time.
        ms.postproc.RewriteLayout(),
    ]


def default_mutators() -> dict:
    """For MetaSchedule's evolutionary search: the rules sample tiles, compute locations and the
    unroll depth."""
    return {
        ms.mutator.MutateTileSize(): 0.9,
        ms.mutator.MutateComputeLocation(): 0.05,
        ms.mutator.MutateUnroll(): 0.05,
    }


def _tensorized(space: Schedule) -> bool:
    return any(inst.kind.name == "Blockize" for inst in space.trace.insts)


def _blocks_consumers_first(sch: Schedule) -> list[str]:
    """Block names to visit: consumers before producers, the root last (MetaSchedule's order)."""
    root = sch.get_sblock("root")
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(root)]
    return [*reversed(names), "root"]


@derived_object
class HeronSpace(PySpaceGenerator):
    """Design spaces from Heron's rules (``ms_heron.rules``) plus any user rules.

    Each block, consumers first, goes through every rule in order; a rule may fork a design space
    into several (one per cache level, with and without tile buffers). TVM does not initialize a
    Python space generator's rules and postprocs, so this class does.

    Parameters
    ----------
    rules
        The generation rules; None means Heron's rules for the tuning target (``default_rules``).
    user_rules
        Rules applied after ``rules`` to every block (Heron's user-defined rules, or any
        MetaSchedule ``ScheduleRule``).
    postprocs
        None means TVM's postprocs for the target (``default_postprocs``).
    mutator_probs
        Mutators for MetaSchedule's evolutionary search, when it searches these spaces
        (``default_mutators`` when None); HeronSearch mutates through its solver instead.
    include_default_spaces
        Also yield MetaSchedule's own default design spaces (its ``PostOrderApply`` with the
        target's rules), so that no program MetaSchedule can reach is outside the search.
        HeronSearch derives their constraint models from their traces like Heron's own, with
        validity constraints only (Heron's performance constraints would cut into them). CPU only,
        and only where Heron's rules tensorize nothing: on VNNI blocks MetaSchedule's spaces
        vectorize around the intrinsic and most of their programs fail to build.
    """

    def __init__(
        self,
        *,
        rules: Sequence[ScheduleRule] | None = None,
        user_rules: Sequence[ScheduleRule] = (),
        postprocs: Sequence[Postproc] | None = None,
        mutator_probs: Mapping[Mutator, float] | None = None,
        include_default_spaces: bool = True,
    ):
        # Before the TuneContext this space is passed to: it imports TVM's whole intrinsic library
        # first thing, ~1 min of TVMScript parsing; held back, a CPU pays 0.1 s (the rest of it
        # comes in below, where the target is known to be CUDA).
        import_x86_intrinsics()
        example = {
            ScheduleRule: "MultiLevelTiling()",
            Postproc: "PackPanels()",
            Mutator: "MutateTileSize()",
        }
        for option, parts, kind in (
            ("rules", rules or (), ScheduleRule),
            ("user_rules", user_rules, ScheduleRule),
            ("postprocs", postprocs or (), Postproc),
            ("mutator_probs", mutator_probs or {}, Mutator),
        ):
            for index, part in enumerate(parts):
                check(
                    isinstance(part, kind),
                    f"HeronSpace({option}=...): item {index} is {part!r}, not a {kind.__name__}; "
                    f"pass instances, such as {example[kind]}",
                )
        check(
            all(p >= 0 for p in (mutator_probs or {}).values()),
            "HeronSpace(mutator_probs=...): give probabilities >= 0",
        )
        check(
            isinstance(include_default_spaces, bool),
            f"HeronSpace(include_default_spaces={include_default_spaces!r}): give True or False",
        )
        # ``None`` means "Heron's defaults for the tuning target", resolved once the target is
        # known.
        self.rules = None if rules is None else list(rules)
        self.user_rules = list(user_rules)
        # The rules' Python class names, for messages: clones reach generate_design_space as FFI
        # objects.
        self.given_rule_names = [_rule_name(r) for r in (rules or [])]
        self.user_rule_names = [_rule_name(r) for r in user_rules]
        self.given_postprocs = None if postprocs is None else list(postprocs)
        self._set_rules([*(default_rules() if rules is None else rules), *user_rules])
        self.postprocs = default_postprocs() if postprocs is None else list(postprocs)
        self.mutator_probs = default_mutators() if mutator_probs is None else dict(mutator_probs)
        self.include_default_spaces = include_default_spaces
        self.default_space = None
        self.rand_state = 0

    def _set_rules(self, rules: list) -> None:
        self.sch_rules = rules
        given = (
            [_rule_name(r) for r in rules[: len(rules) - len(self.user_rules)]]
            if self.rules is None
            else self.given_rule_names
        )
        self.rule_names = [*given, *self.user_rule_names]

    def _initialize_with_tune_context(self, context) -> None:
        self.rand_state = int(context.rand_state)
        target = context.target
        ensure_registered(target)
        if self.rules is None:
            self._set_rules([*default_rules(target), *self.user_rules])
        if self.given_postprocs is None:
            self.postprocs = default_postprocs(target)
        for part in (*self.sch_rules, *self.postprocs, *self.mutator_probs):
            part._initialize_with_tune_context(context)  # pylint: disable=protected-access
        if self.include_default_spaces and not is_cuda(target):
            self.default_space = ms.space_generator.PostOrderApply()
            self.default_space._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def generate_design_space(self, mod: IRModule) -> list[Schedule]:
        spaces = [Schedule(mod, seed=self.rand_state, debug_mask="none")]  # -1: random, as in TVM
        *blocks, root = _blocks_consumers_first(spaces[0])
        for name in blocks:
            spaces = self._apply_rules(spaces, name)
        spaces = [out for sch in spaces for out in self._place_created_producers(sch, set(blocks))]
        spaces = self._apply_rules(spaces, root)
        if self.default_space is not None and not any(_tensorized(s) for s in spaces):
            spaces += self._default_spaces(mod)
        return spaces

    def _apply_rules(self, spaces: list[Schedule], name: str) -> list[Schedule]:
        for rule, rule_name in zip(self.sch_rules, self.rule_names):
            spaces = [out for sch in spaces for out in _apply(rule, rule_name, sch, name)]
        return spaces

    def _place_created_producers(self, sch: Schedule, visited: set[str]) -> list[Schedule]:
        """Producers the rules created and left unplaced (a padded weight's pad-and-pack copy) go
        through the rules too, so that their place is sampled: packed per panel inside the GEMM's
        tiles, as MLAS does, instead of in a whole extra pass over the weight."""
        spaces = [sch]
        for name in _blocks_consumers_first(sch)[:-1]:
            if name not in visited and needs_sampled_location(sch, sch.get_sblock(name)):
                spaces = self._apply_rules(spaces, name)
        return spaces

    def _default_spaces(self, mod: IRModule) -> list[Schedule]:
        """MetaSchedule's own design spaces, marked as such; none where its rules fail on the task
        (they do on loops past int32), which then tunes in HeronSpace's spaces alone."""
        try:
            defaults = list(self.default_space.generate_design_space(mod))
        except Exception as err:  # pylint: disable=broad-except  # TVM's rules: their bug must not stop the task
            logging.getLogger(__name__).warning(
                "HeronSpace: MetaSchedule's default design spaces fail on this task and are left "
                "out: %s",
                _last_line(err),
            )
            return []
        for sch in defaults:
            sch.annotate(sch.get_sblock("root"), SPACE_ORIGIN, METASCHEDULE_SPACE)
        return defaults

    def clone(self) -> "HeronSpace":
        twin = HeronSpace(
            rules=None if self.rules is None else [r.clone() for r in self.rules],
            user_rules=[r.clone() for r in self.user_rules],
            postprocs=None
            if self.given_postprocs is None
            else [p.clone() for p in self.given_postprocs],
            mutator_probs={m.clone(): p for m, p in self.mutator_probs.items()},
            include_default_spaces=self.include_default_spaces,
        )
        twin.given_rule_names, twin.user_rule_names = (
            list(self.given_rule_names),
            list(self.user_rule_names),
        )
        twin._set_rules(list(twin.sch_rules))  # pylint: disable=protected-access
        return twin


def tuning_context(
    func: PrimFunc | IRModule, target: Target, space: SpaceGenerator | None = None
) -> ms.TuneContext:
    """The TuneContext tuning ``func`` on ``target`` with ``space`` (``HeronSpace()`` when None)
    works in, cloned as MetaSchedule's task scheduler clones it: its space generator's rules and
    postprocs are initialized for the target, as in a tuning run. Its random state is fixed, so that
    what a report or a test reads of a space's sampled decisions is the same every time."""
    ensure_registered(target)
    mod = func if isinstance(func, IRModule) else IRModule({"main": func})
    context = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator=space or HeronSpace(),
        task_name="main",
        rand_state=0,
    )
    return context.clone()


def design_spaces(
    func: PrimFunc | IRModule, target: Target, space: SpaceGenerator | None = None
) -> list[Schedule]:
    """The design spaces that tuning ``func`` on ``target`` searches (see :func:`tuning_context`):
    for reports, tests and benchmarks that look inside a space instead of tuning it."""
    return list(tuning_context(func, target, space).generate_design_space())


def design_spaces_and_postprocs(
    func: PrimFunc | IRModule, target: Target, space: SpaceGenerator | None = None
) -> tuple[list[Schedule], list[Postproc]]:
    """:func:`design_spaces` and the postprocs, initialized for the target, that finish a sample of
    them."""
    context = tuning_context(func, target, space)
    return list(context.generate_design_space()), list(context.space_generator.postprocs)


def _apply(rule, rule_name: str, sch: Schedule, name: str) -> list[Schedule]:
    """``rule`` on block ``name`` of a copy of ``sch``; a rule that fails leaves ``sch`` as it was
    (one rule's bug on one block must not stop the task from tuning)."""
    if not has_block(sch, name):
        return [sch]
    trial = sch.copy()
    try:
        return list(rule.apply(trial, trial.get_sblock(name)))
    except Exception as err:  # pylint: disable=broad-except
        logging.getLogger(__name__).warning(
            "HeronSpace: rule %s failed on block %r and is skipped there: %s",
            rule_name,
            name,
            _last_line(err),
        )
        return [sch]


def _last_line(err: Exception) -> str:
    """An error's last line: TVM's errors end with their message, after the IR they print."""
    return str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__


def _rule_name(rule) -> str:
    return type(getattr(rule, "_inst", rule)).__name__
