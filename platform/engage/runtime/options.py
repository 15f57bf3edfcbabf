"""``RunOptions``: how a job runs (cluster, tracking store, home), apart from what it runs.

The spec says what a job does; these options come from the environment and the command
line (the CLI builds them), so one spec runs unchanged on a laptop or a cluster. Every
stage of every job kind takes them typed, never as ``Any``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunOptions:
    """Where and how a job runs.

    Parameters
    ----------
    address:
        The Ray cluster to join (``host:port``, ``ray://...`` or ``auto``); None: the
        ``RAY_ADDRESS`` environment variable, else an embedded local cluster.
    tracking_uri:
        The MLflow tracking URI; None: the spec's, else MLflow on SQLite under ``home``.
    home:
        The folder a job writes under (spool, MLflow store, event store, Ray results).
    num_cpus:
        CPUs of an embedded local cluster (None: all of them).
    verbose:
        Show Ray's worker logs on the driver.
    drain_timeout_s:
        How long the end of a run waits for MLflow to have every point.
    """

    address: str | None = None
    tracking_uri: str | None = None
    home: Path = field(default_factory=lambda: Path(".engage").resolve())
    num_cpus: int | None = None
    verbose: bool = False
    drain_timeout_s: float = 60.0
