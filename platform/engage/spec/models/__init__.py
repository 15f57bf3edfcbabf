"""Typed pipeline spec: the pydantic models a YAML spec is parsed into, one module per section.

Every model forbids unknown keys, so a typo is an error rather than a silent default.
Checks that need more than one section (a batch larger than the data, a gate metric the
task does not produce) live in :mod:`engage.spec.checks`. Every model is importable from
here (``from engage.spec.models import TrainSpec``).
"""

from engage.spec.models.base import ColumnName, Name, StrictModel
from engage.spec.models.data import (
    CsvSource,
    DataSpec,
    FileSource,
    ParquetSource,
    PreprocessStep,
    SimulationShards,
    SimulationSource,
    Source,
    SplitSpec,
    SyntheticSource,
)
from engage.spec.models.deploy import (
    AutoscalingSpec,
    CanarySpec,
    DeploySpec,
    DriftWatchSpec,
    SamplingSpec,
)
from engage.spec.models.federated import (
    AggregatorSpec,
    AttacksSpec,
    ClientAttackKind,
    ClientAttackSpec,
    FederatedSpec,
    ScoringSpec,
    TransitAttackKind,
    TransitAttackSpec,
)
from engage.spec.models.pipeline import PipelineSpec
from engage.spec.models.search import AdaptiveSpec, SearchParam, TuneSpec
from engage.spec.models.tracking import (
    ExportSpec,
    GateSpec,
    MonitorSpec,
    RegistrationSpec,
    TrackingSpec,
)
from engage.spec.models.train import CommSpec, EvaluateSpec, FaultSpec, ModelSpec, TrainSpec

__all__ = [
    "AdaptiveSpec",
    "AggregatorSpec",
    "AttacksSpec",
    "AutoscalingSpec",
    "CanarySpec",
    "ClientAttackKind",
    "ClientAttackSpec",
    "ColumnName",
    "CommSpec",
    "CsvSource",
    "DataSpec",
    "DeploySpec",
    "DriftWatchSpec",
    "EvaluateSpec",
    "ExportSpec",
    "FaultSpec",
    "FederatedSpec",
    "FileSource",
    "GateSpec",
    "ModelSpec",
    "MonitorSpec",
    "Name",
    "ParquetSource",
    "PipelineSpec",
    "PreprocessStep",
    "RegistrationSpec",
    "SamplingSpec",
    "ScoringSpec",
    "SearchParam",
    "SimulationShards",
    "SimulationSource",
    "Source",
    "SplitSpec",
    "StrictModel",
    "SyntheticSource",
    "TrackingSpec",
    "TrainSpec",
    "TransitAttackKind",
    "TransitAttackSpec",
    "TuneSpec",
]
