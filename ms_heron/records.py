"""What a MetaSchedule tuning record says about speed: a leaf module every layer may read."""

#: MetaSchedule stores a candidate that failed to build or run with a run time of 1e10 s.
FAILED_RUN_SECS = 1e9


def record_seconds(run_secs) -> float:
    """Mean measured seconds of a tuning record's ``run_secs``; inf when it failed to build or run."""
    secs = [float(x) for x in run_secs or []]
    return sum(secs) / len(secs) if secs and max(secs) < FAILED_RUN_SECS else float("inf")
