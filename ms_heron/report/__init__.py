"""What a run found and what it is held against: the summary and task tables the console and
``report.md`` show (:mod:`.tables`), the markdown report with its plot (:mod:`.markdown`), and the
libraries a run is compared with, timed like its kernels (:mod:`.baselines`).

Its names are imported on first use (:mod:`ms_heron.lazy`): ``ms_heron.report.baselines`` alone
does not import the tuner.
"""

from ..lazy import lazy_attributes

__all__ = ["summary_rows", "task_table", "timing_note", "write"]
__getattr__ = lazy_attributes(
    __name__,
    {
        "summary_rows": ".tables",
        "task_table": ".tables",
        "timing_note": ".tables",
        "write": ".markdown",
    },
)
