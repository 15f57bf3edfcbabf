"""The ``data`` section: sources (synthetic, simulation, csv, parquet), split, preprocessing."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from engage.spec.models.base import ColumnName, Name, StageResources, StrictModel


class SyntheticSource(StrictModel):
    """The built-in smart-living generator (households with sensors at 1-minute resolution)."""

    type: Literal["synthetic"]
    households: int = Field(4, ge=1, le=1000, description="number of households simulated")
    days: int = Field(14, ge=1, le=366, description="days simulated per household")
    seed: int = Field(0, ge=0, description="generator seed; same seed, same data")
    start: str = Field(
        "2026-01-05",
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="first simulated day (ISO date, local midnight)",
    )
    noise: float = Field(1.0, ge=0.0, le=10.0, description="multiplier on sensor noise")


class SimulationShards(StrictModel):
    """Where and how a simulation is streamed to Parquet shards (by household and period)."""

    dir: str = Field(min_length=1, description="folder of the shards, relative to the spec file")
    households_per_shard: int = Field(
        16, ge=1, le=10_000, description="households in one shard (one Ray task each)"
    )
    days_per_shard: int | None = Field(
        None, ge=1, le=366, description="days in one shard; unset: all days of a household"
    )


class SimulationSource(StrictModel):
    """The parameterised smart-living simulator (engage.data.simulator): one scenario."""

    type: Literal["simulation"]
    scenario: dict[str, float] = Field(
        default_factory=dict,
        description="scenario parameters by name (docs/simulator.md); unnamed ones take defaults",
    )
    households: int = Field(4, ge=1, le=100_000, description="number of households simulated")
    days: int = Field(14, ge=1, le=366, description="days simulated per household")
    seed: int = Field(0, ge=0, description="simulation seed; same scenario and seed, same data")
    start: str = Field(
        "2026-01-05",
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="first simulated day (ISO date, local midnight)",
    )
    fill_dropouts: bool = Field(
        True,
        description="carry each household's last reading over dropouts (NaN) so features stay "
        "finite; the fault label still marks them",
    )
    shards: SimulationShards | None = Field(
        None,
        description="stream the set to Parquet shards (python -m engage.data.simulator SPEC "
        "writes them in parallel Ray tasks); a run writes them unless present, then reads "
        "them back, or streams them to the workers (data.streaming)",
    )

    @field_validator("scenario")
    @classmethod
    def _known_and_in_range(cls, v: dict[str, float]) -> dict[str, float]:
        # Imported here: engage.data imports this module, so a top-level import would loop.
        from engage.data.simulator.space import Scenario

        return {k: Scenario(v)[k] for k in v}


class FileSource(StrictModel):
    """Rows from a table file; the ``csv`` and ``parquet`` sources share these fields."""

    path: str = Field(
        min_length=1,
        description="a file, a folder of shards or a glob (data/*.parquet), relative to the "
        "spec file",
    )
    timestamp: ColumnName = Field("timestamp", description="column giving each row's time")
    group: ColumnName | None = Field(
        None,
        description="column naming independent series (e.g. household); windows never span two",
    )


class CsvSource(FileSource):
    """Rows from a CSV file with a header."""

    type: Literal["csv"]


class ParquetSource(FileSource):
    """Rows from a Parquet file."""

    type: Literal["parquet"]


Source = Annotated[
    SyntheticSource | SimulationSource | CsvSource | ParquetSource, Field(discriminator="type")
]


class SplitSpec(StrictModel):
    """Fractions of each series' time span, in time order: train, then val, then test."""

    train: float = Field(0.7, gt=0.0, lt=1.0)
    val: float = Field(0.15, gt=0.0, lt=1.0)
    test: float = Field(0.15, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitSpec:
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must be 1.0, got {total:g}")
        return self


class PreprocessStep(StrictModel):
    """One preprocessing operator and its parameters (``engage.data.preprocess``)."""

    op: Name = Field(
        description="a registered preprocessing operator: resample (rows), clip, rolling, "
        "lag, spectral, jitter, scale (windows)"
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="the operator's parameters, checked by its schema"
    )


class DataSpec(StrictModel):
    """What to learn from: where rows come from and how they become windows."""

    source: Source
    features: list[ColumnName] = Field(min_length=1, description="input columns, in order")
    target: ColumnName
    task: Literal["classification", "regression"]
    window: int = Field(30, ge=1, le=10_000, description="rows of history in one sample")
    horizon: int = Field(
        0, ge=0, le=10_000, description="predict the target this many rows after the window"
    )
    stride: int = Field(1, ge=1, le=10_000, description="rows between consecutive windows")
    split: SplitSpec = SplitSpec()
    normalize: bool = Field(True, description="standardise features with train-split statistics")
    preprocess: list[PreprocessStep] = Field(
        default_factory=list,
        description="operators applied in order, fitted on the train split; they travel with "
        "the logged model, so serving still takes raw windows",
    )
    preprocess_device: Literal["cpu", "gpu", "auto"] = Field(
        "cpu",
        description="where window operators run: cpu, gpu (error without one) or auto "
        "(gpu when present, else cpu)",
    )
    streaming: bool | Literal["auto"] = Field(
        "auto",
        description="stream the training split to each Ray Train worker as its Ray Data shard "
        "instead of holding it in memory: true, false, or auto (stream a csv or parquet "
        "source, or a simulation's shards, larger than streaming_threshold_mb on disk)",
    )
    streaming_threshold_mb: float = Field(
        512.0, gt=0, description="on-disk size above which streaming: auto streams (MiB)"
    )
    shuffle_buffer: int = Field(
        65_536,
        ge=1,
        le=100_000_000,
        description="training windows shuffled together each epoch: the split is visited in "
        "consecutive chunks of this many windows, each in a seeded permutation (the same "
        "batches in memory and streamed); at least the split's size for a full shuffle",
    )
    resources: StageResources | None = Field(
        None,
        description="Ray resources of the data stage: when set, loading, preprocessing, "
        "windowing and splitting run in one Ray task (engage.prepare_data) that reserves "
        "them, on a node that offers them (a CPU-only node's label while training asks for "
        "GPUs); the source must be readable there; unset: in the driver",
    )

    @field_validator("features")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dupes = sorted({f for f in v if v.count(f) > 1})
        if dupes:
            raise ValueError(f"duplicate feature(s) {', '.join(dupes)}")
        return v

    @model_validator(mode="after")
    def _streams_a_file_source(self) -> DataSpec:
        sharded = self.source.type == "simulation" and self.source.shards is not None
        if self.streaming is True and self.source.type not in ("csv", "parquet") and not sharded:
            what = "a simulation without shards" if self.source.type == "simulation" else None
            raise ValueError(
                "streaming: true needs a csv or parquet source or a simulation with shards, "
                f"not {what or repr(self.source.type)}; set data.source.shards, or "
                "streaming: auto or false"
            )
        # data.preprocess streams too; an operator whose fit needs every training window
        # (clip by quantile) is refused at its own field by engage.data.preprocess.plan.
        return self

    @model_validator(mode="after")
    def _target_not_feature_for_now(self) -> DataSpec:
        if self.horizon == 0 and self.target in self.features:
            raise ValueError(
                f"target {self.target!r} is also a feature with horizon 0: the model would "
                "see its own label; remove it from features or set horizon >= 1"
            )
        return self
