"""Tracking: MLflow runs written through an explicit client, lineage, the registry."""

from engage.tracking.registry import GateDecision, Registration, decide, register
from engage.tracking.run import PipelineRun, RunRef
from engage.tracking.store import ensure_experiment, open_client, resolve_tracking_uri

__all__ = [
    "GateDecision",
    "PipelineRun",
    "Registration",
    "RunRef",
    "decide",
    "ensure_experiment",
    "open_client",
    "register",
    "resolve_tracking_uri",
]
