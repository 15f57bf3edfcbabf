"""Tracking: a durable spool drained to MLflow, lineage, the registry gate.

Jobs write through :class:`PipelineRun`, which only appends to the :class:`Spool`; the
:class:`Drainer` is the one writer to MLflow.
"""

from engage.tracking._ops import artifacts_dir
from engage.tracking.catalog import (
    CANDIDATE_ALIAS,
    CHAMPION_ALIAS,
    ModelRef,
    list_models,
    show_model,
)
from engage.tracking.drain import Drainer, DrainStatus
from engage.tracking.faults import SpoolDamaged
from engage.tracking.lineage import Lineage, capture_lineage
from engage.tracking.promotion import Promotion, Rollback, promote, rollback
from engage.tracking.registry import GateDecision, Registration, decide
from engage.tracking.repair import RepairReport, repair
from engage.tracking.run import PipelineRun, RunIds
from engage.tracking.spool import Spool, SpoolStats
from engage.tracking.store import ensure_experiment, open_client, resolve_tracking_uri
from engage.tracking.uris import mask_uri
from engage.tracking.uris import resolve as resolve_uri

__all__ = [
    "CANDIDATE_ALIAS",
    "CHAMPION_ALIAS",
    "DrainStatus",
    "Drainer",
    "GateDecision",
    "Lineage",
    "ModelRef",
    "PipelineRun",
    "Promotion",
    "Registration",
    "RepairReport",
    "Rollback",
    "RunIds",
    "Spool",
    "SpoolDamaged",
    "SpoolStats",
    "artifacts_dir",
    "capture_lineage",
    "decide",
    "ensure_experiment",
    "list_models",
    "mask_uri",
    "open_client",
    "promote",
    "repair",
    "resolve_tracking_uri",
    "resolve_uri",
    "rollback",
    "show_model",
]
