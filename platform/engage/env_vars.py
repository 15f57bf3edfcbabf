"""Every environment variable engage reads, in one typed list.

Precedence everywhere: spec file < environment < command-line flag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EnvVar:
    """One environment variable engage reads: its name and what setting it does."""

    name: str
    description: str

    def get(self) -> str | None:
        """The variable's value, or None when it is unset or empty (empty means "not set")."""
        value = os.environ.get(self.name)
        return value if value not in (None, "") else None


ENGAGE_HOME = EnvVar(
    "ENGAGE_HOME", "folder for everything a job writes by default (default: ./.engage)"
)
RAY_ADDRESS = EnvVar("RAY_ADDRESS", "Ray cluster to run on, as host:port or 'auto'")
MLFLOW_TRACKING_URI = EnvVar(
    "MLFLOW_TRACKING_URI", "MLflow tracking URI; overrides the spec's tracking.tracking_uri"
)
ENGAGE_RAY_LOGS = EnvVar("ENGAGE_RAY_LOGS", "set to 1 to stream Ray worker logs to the terminal")
ENGAGE_RAY_DASHBOARD = EnvVar(
    "ENGAGE_RAY_DASHBOARD",
    "set to 0 to start the Ray clusters engage starts (the embedded one, the serving head) "
    "without Ray's dashboard: 3-4 CPU-seconds less per start",
)
ENGAGE_EVENTS_URI = EnvVar(
    "ENGAGE_EVENTS_URI",
    "SQLAlchemy URL of the event store (jobs, events, alerts); default sqlite under ENGAGE_HOME",
)

ALL = (
    ENGAGE_HOME,
    RAY_ADDRESS,
    MLFLOW_TRACKING_URI,
    ENGAGE_RAY_LOGS,
    ENGAGE_RAY_DASHBOARD,
    ENGAGE_EVENTS_URI,
)


def ray_dashboard() -> bool:
    """Whether clusters engage starts run Ray's dashboard (yes unless ENGAGE_RAY_DASHBOARD=0)."""
    return ENGAGE_RAY_DASHBOARD.get() != "0"


def engage_home(override: str | Path | None = None) -> Path:
    """The absolute ``.engage`` folder: flag > ENGAGE_HOME > ./.engage."""
    chosen = override or ENGAGE_HOME.get() or ".engage"
    return Path(chosen).expanduser().resolve()


THIRD_PARTY_DEFAULTS = {
    # MLflow draws a tqdm bar for every artifact download (a model, a drift reference);
    # engage prints its own progress, and the bars garble its output and CI logs.
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # Ray Train starts an actor per run that watches the nodes for a cloud provider's
    # preemption notice. The clusters that inherit this process's environment are the ones
    # engage starts on this machine (the embedded cluster, the serving head), where no node
    # is preempted; the actor's process cost each run about 2.5 s of CPU on 2 cores. Ray
    # Train hands the driver's RAY_TRAIN_* variables to its controller and workers, so this
    # and the poll below apply on a cluster joined with --address too (set them to override).
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # Ray Train's controller takes a worker's report (metrics, checkpoint) at its next poll
    # of the workers, every 2 s by default, and a worker's next report waits for that (a
    # queue of one). An epoch shorter than the poll then takes a whole poll, and the run
    # ends at the poll after the last report: the 5-epoch quickstart's train stage took
    # 33.5 s instead of 19.4 s here. A poll is one small task per worker; one that runs
    # late under load is simply awaited at the next poll (Ray fails a worker only after
    # its health check hangs for 10 minutes).
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",
}
"""Third-party variables the ``engage`` command sets unless the user already has."""


def set_third_party_defaults() -> None:
    """Set :data:`THIRD_PARTY_DEFAULTS` in this process (and its children) where unset."""
    for name, value in THIRD_PARTY_DEFAULTS.items():
        os.environ.setdefault(name, value)
