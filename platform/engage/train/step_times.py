"""Where a training step's time goes, and Ray Data's own statistics of a streamed split.

The training loop (:mod:`engage.train.loop`) reads the clock four times a step;
:func:`step_breakdown` turns the readings into the step's metrics (data wait,
host-to-device copy, compute), reported per worker through the job's reporter, and
:class:`EpochTimes` adds them up for the epoch's metrics. The monitor's data stall ratio
(:mod:`engage.monitor.metrics`) is the wait's share of the three. Kept apart from the loop
so the measurement is tested without a model, and costs two subtractions and a dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engage.events import Reporter

RAY_DATA_STATS = "ray_data_stats.txt"
"""The run artifact a streamed split's Ray Data statistics are meant for."""


def step_breakdown(started: float, fetched: float, copied: float, done: float) -> dict[str, float]:
    """One step's time, split where it goes, from four ``time.perf_counter`` readings.

    Parameters
    ----------
    started : float
        Before asking for the next batch.
    fetched : float
        When the batch arrived: ``data_wait_seconds`` is the time blocked on the input
        pipeline (a deliberate ``train.faults.data_delay_seconds`` included).
    copied : float
        When the batch was on the worker's device: ``host_to_device_seconds`` (about 0 on
        CPU, where the copy is a no-op, but measured, not assumed).
    done : float
        After forward, backward, the optimiser step and the loss read back (which waits for
        a GPU): ``compute_seconds``.

    Returns
    -------
    dict of str to float
        The step's metrics; ``step_seconds`` is the sum of the three parts.
    """
    return {
        "step_seconds": done - started,
        "data_wait_seconds": fetched - started,
        "host_to_device_seconds": copied - fetched,
        "compute_seconds": done - copied,
    }


@dataclass
class EpochTimes:
    """One worker's epoch: its loss sum and where its step time went, in seconds."""

    loss_sum: float = 0.0
    wait: float = 0.0  # blocked on the next batch
    copy: float = 0.0  # host-to-device copy of the batches
    compute: float = 0.0  # forward, backward, optimiser step
    seconds: float = 0.0  # the epoch's wall time


def report_ray_data_stats(reporter: Reporter, shard: Any) -> None:
    """Report Ray Data's own operator statistics of a streamed split as one lifecycle event,
    ``ray_data_stats`` with ``{"text": ..., "artifact_file": RAY_DATA_STATS}``.

    ``shard.stats()`` (one call to the split coordinator, once per job) covers the whole
    dataset's execution: each operator's wall and CPU time, rows and bytes, and this
    iterator's own time blocked on Ray Data. Statistics that cannot be read are reported as
    the reason, never raised: they are evidence, not a reason to fail a finished job.
    """
    try:
        text = shard.stats()
    except Exception as exc:
        text = f"Ray Data statistics could not be read: {type(exc).__name__}: {exc}"
    reporter.lifecycle("ray_data_stats", text=text, artifact_file=RAY_DATA_STATS)
