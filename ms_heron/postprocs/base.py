"""What every ms_heron postproc shares: a faithful ``clone`` and a telling ``repr``."""

from __future__ import annotations

from tvm.s_tir.meta_schedule.postproc import PyPostproc

from ..schedule import options


class HeronPostproc(PyPostproc):
    """Base of the postprocs (undecorated, as :class:`~ms_heron.rules.base.HeronRule`)."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def clone(self):
        return options.clone(self)

    def __repr__(self) -> str:
        return options.describe(self)
