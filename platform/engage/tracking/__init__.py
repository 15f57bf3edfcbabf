"""Tracking: a durable spool drained to MLflow, lineage, the registry gate.

Jobs write through :class:`PipelineRun`, which only appends to the :class:`Spool`; the
:class:`Drainer` is the one writer to MLflow.
"""

from engage.tracking.drain import Drainer
from engage.tracking.registry import GateDecision, Registration, decide
from engage.tracking.run import PipelineRun, RunIds
from engage.tracking.spool import Spool, SpoolStats
from engage.tracking.store import ensure_experiment, open_client, resolve_tracking_uri

__all__ = [
    "Drainer",
    "GateDecision",
    "PipelineRun",
    "Registration",
    "RunIds",
    "Spool",
    "SpoolStats",
    "decide",
    "ensure_experiment",
    "open_client",
    "resolve_tracking_uri",
]
