"""Tuning: the set-up every call needs (:mod:`.setup`), how candidates are built and measured
(:mod:`.builder`, :mod:`.measure`) under a wall-clock budget (:mod:`.budget`), the one loop every
tuning call ends in (:mod:`.loop`), a resumable run in a work dir (:mod:`.run`: the path the
command, the demo, the bench scripts and ``tune_model`` take) and the work dir's own files
(:mod:`.workdir`: run file, lock, progress log, merge), the records store that outlives a run
(:mod:`.store`), the Python entry points
(:mod:`.api`), a model run's best kernels timed again at its end (:mod:`.confirm`), and what its
untuned tasks run when it compiles early (:mod:`.fallback`)."""

from ..lazy import lazy_attributes

#: Each public name and the module it is imported from on first use.
_MODULES = {
    **dict.fromkeys(
        [
            "static_shape_tuning_pipeline",
            "tune_func",
            "tune_model",
            "tune_pass",
            "tune_workload",
        ],
        ".api",
    ),
    **dict.fromkeys(["NoValidRecord", "TuningRound", "best_schedule", "tune_tasks"], ".loop"),
    **dict.fromkeys(["TuningRun"], ".run"),
    **dict.fromkeys(["RecordStore"], ".store"),
    **dict.fromkeys(["Progress", "RunError", "RunSpec", "merge_runs"], ".workdir"),
    **dict.fromkeys(["Search", "reset_metaschedule_logger", "search_parts"], ".setup"),
}
__all__ = sorted(_MODULES)
__getattr__ = lazy_attributes(__name__, _MODULES)
