"""Tracking: a durable spool drained to MLflow, lineage, the registry gate.

Jobs write through :class:`PipelineRun`, which only appends to the :class:`Spool`; the
:class:`Drainer` is the one writer to MLflow.
"""

from engage.tracking.catalog import (
    CANDIDATE_ALIAS,
    CHAMPION_ALIAS,
    ModelRef,
    list_models,
    show_model,
)
from engage.tracking.drain import Drainer
from engage.tracking.lineage import Lineage, capture_lineage
from engage.tracking.promotion import Promotion, Rollback, promote, rollback
from engage.tracking.registry import GateDecision, Registration, decide
from engage.tracking.run import PipelineRun, RunIds
from engage.tracking.spool import Spool, SpoolStats
from engage.tracking.store import ensure_experiment, open_client, resolve_tracking_uri

__all__ = [
    "CANDIDATE_ALIAS",
    "CHAMPION_ALIAS",
    "Drainer",
    "GateDecision",
    "Lineage",
    "ModelRef",
    "PipelineRun",
    "Promotion",
    "Registration",
    "Rollback",
    "RunIds",
    "Spool",
    "SpoolStats",
    "capture_lineage",
    "decide",
    "ensure_experiment",
    "list_models",
    "open_client",
    "promote",
    "resolve_tracking_uri",
    "rollback",
    "show_model",
]
