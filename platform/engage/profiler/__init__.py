"""``engage profile``: where a job's input pipeline loses time, and what would fix it.

Each stage is measured alone (the model on batches in memory, the loader from storage and
from cache, preprocessing on a CPU core or the GPU, reads throttled to a bandwidth); the
job is classified storage-, preprocessing- or compute-bound and every remedy's speedup is
predicted (:mod:`engage.profiler.verdict`). :func:`run_pipeline` runs the same pipeline
end to end, so a prediction can be checked against a measurement, and
:func:`engage.profiler.compare.abba` measures one pipeline against another in an order
that cancels what the order does.
"""

from engage.profiler.loader import LoaderConfig, RunStats, WindowStore, run_pipeline
from engage.profiler.report import ProfileReport, profile_job
from engage.profiler.throttle import parse_bandwidth, read_throttled
from engage.profiler.verdict import (
    COMPUTE,
    PREPROCESSING,
    STORAGE,
    Remedy,
    StageTimes,
    classify,
    remedies,
)

__all__ = [
    "COMPUTE",
    "PREPROCESSING",
    "STORAGE",
    "LoaderConfig",
    "ProfileReport",
    "Remedy",
    "RunStats",
    "StageTimes",
    "WindowStore",
    "classify",
    "parse_bandwidth",
    "profile_job",
    "read_throttled",
    "remedies",
    "run_pipeline",
]
