"""What every ms_heron rule shares: the target it serves, a faithful ``clone`` and a telling
``repr``."""

from __future__ import annotations

from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule

from ..schedule import options


class HeronRule(PyScheduleRule):
    """Base of the generation rules (undecorated: ``@derived_object`` classes cannot be subclassed;
    each rule is decorated with :func:`~ms_heron.schedule.options.heron_object`).

    A rule's options are keyword-only constructor parameters kept as attributes of the same names
    (:mod:`ms_heron.schedule.options`); the target is filled in by ``_initialize_with_tune_context``
    (``None`` until a TuneContext exists).
    """

    target = None

    def _initialize_with_tune_context(self, context) -> None:
        self.target = context.target

    def clone(self):
        return options.clone(self)

    def __repr__(self) -> str:
        return options.describe(self)
