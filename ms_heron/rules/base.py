"""What every ms_heron rule shares: the target it serves and a faithful ``clone``."""

from __future__ import annotations

import copy

from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule


class HeronRule(PyScheduleRule):
    """Base of the generation rules (undecorated: ``@derived_object`` classes cannot be subclassed).

    Subclasses keep their parameters as plain attributes; ``clone`` copies them, and the target
    is filled in by ``_initialize_with_tune_context`` (``None`` until a TuneContext exists).
    """

    target = None

    def _initialize_with_tune_context(self, context) -> None:
        self.target = context.target

    def clone(self):
        # ``self`` is the Python instance inside the TVM object; build a new TVM object (its class).
        decorated = type(self._outer())
        return decorated(**{k: copy.deepcopy(v) for k, v in self._params().items()})

    def _params(self) -> dict:
        """Constructor arguments of this rule (what ``clone`` must carry over)."""
        return {}
