"""The Models page: registered models, their versions, aliases and gate decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engage.monitor.views.sources import reading_mlflow


@dataclass(frozen=True)
class ModelRow:
    """One registered version, as ``engage models show`` describes it."""

    model: str
    version: str
    aliases: tuple[str, ...]
    run_id: str | None
    created_ms: int
    gate: str | None
    gate_metric: str | None
    metric_value: float | None
    history: dict[str, str] = field(default_factory=dict)


def model_rows(client: Any | None) -> list[ModelRow]:
    """Every version of every registered model: models by name, versions newest first."""
    if client is None:
        return []
    from engage.tracking.catalog import ModelRef, list_models, show_model

    rows = []
    with reading_mlflow(client):
        for summary in list_models(client):
            view = show_model(client, ModelRef(summary.name))
            for v in view.versions:
                rows.append(
                    ModelRow(
                        v.name,
                        v.version,
                        v.aliases,
                        v.run_id,
                        v.created_ms,
                        v.gate,
                        v.metric.describe() if v.metric else None,
                        v.metric_value,
                        dict(v.history),
                    )
                )
    return rows
