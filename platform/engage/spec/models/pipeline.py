"""The whole spec: :class:`PipelineSpec`, one field per section."""

from __future__ import annotations

from pydantic import Field

from engage.spec.models.base import Name, StrictModel
from engage.spec.models.data import DataSpec
from engage.spec.models.deploy import DeploySpec
from engage.spec.models.federated import FederatedSpec
from engage.spec.models.search import AdaptiveSpec, TuneSpec
from engage.spec.models.tracking import ExportSpec, MonitorSpec, TrackingSpec
from engage.spec.models.train import EvaluateSpec, ModelSpec, TrainSpec


class PipelineSpec(StrictModel):
    """A whole pipeline: what data, which model, how to train, where to track."""

    name: Name
    description: str = ""
    data: DataSpec
    model: ModelSpec
    train: TrainSpec = TrainSpec()
    evaluate: EvaluateSpec = Field(
        default_factory=EvaluateSpec,
        description="where the test-split evaluation runs (its Ray resources)",
    )
    tracking: TrackingSpec = TrackingSpec()
    monitor: MonitorSpec = Field(
        default_factory=MonitorSpec, description="the live monitor: endpoint and alert evaluation"
    )
    export: ExportSpec = Field(
        default_factory=ExportSpec, description="ONNX and TorchScript copies checked against torch"
    )
    deploy: DeploySpec = Field(
        default_factory=DeploySpec, description="serving with `engage deploy`"
    )
    federated: FederatedSpec | None = Field(
        None, description="federated learning over households instead of Ray Train"
    )
    tune: TuneSpec | None = Field(
        None, description="tune spec fields with Ray Tune, then retrain and register the best"
    )
    adaptive: AdaptiveSpec | None = Field(
        None, description="adaptive sampling of the simulator's scenario space, round by round"
    )

    @property
    def experiment_name(self) -> str:
        """The MLflow experiment: ``tracking.experiment``, else the spec's ``name``."""
        return self.tracking.experiment or self.name
