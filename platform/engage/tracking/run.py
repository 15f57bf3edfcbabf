"""One MLflow run per pipeline run, written through an explicit client."""

from __future__ import annotations

import json
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import TrackingError
from engage.runtime.reporting import Event
from engage.tracking.lineage import environment_tags, flatten, git_commit

_MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limit
_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_VALUE = 6000


@dataclass(frozen=True)
class LoggedModelRef:
    model_id: str
    uri: str  # models:/<model_id>
    artifact_location: str


@dataclass(frozen=True)
class RunRef:
    tracking_uri: str
    experiment_id: str
    run_id: str


class PipelineRun:
    """Creates the run, logs what the stages produce, and ends it with the right status."""

    def __init__(self, client: Any, ref: RunRef) -> None:
        self.client = client
        self.ref = ref

    @classmethod
    def start(
        cls, client: Any, experiment_id: str, run_name: str, tags: Mapping[str, str], where: Path
    ) -> PipelineRun:
        from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME

        all_tags = {**environment_tags(), MLFLOW_SOURCE_NAME: "engage", **tags}
        commit = git_commit(where)
        if commit:
            all_tags[MLFLOW_GIT_COMMIT] = commit
        run = _call(client.create_run, experiment_id, run_name=run_name, tags=all_tags)
        return cls(client, RunRef(client.tracking_uri, experiment_id, run.info.run_id))

    @property
    def run_id(self) -> str:
        return self.ref.run_id

    def log_params(self, resolved_spec: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(k, v[:_MAX_PARAM_VALUE]) for k, v in flatten(resolved_spec).items()]
        for i in range(0, len(params), _MAX_PARAMS_PER_BATCH):
            _call(self.client.log_batch, self.run_id, params=params[i : i + _MAX_PARAMS_PER_BATCH])

    def log_text(self, text: str, artifact_file: str) -> None:
        _call(self.client.log_text, self.run_id, text, artifact_file)

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        self.log_text(json.dumps(data, indent=2, default=str), artifact_file)

    def log_metric_events(self, events: Sequence[Event]) -> None:
        from mlflow.entities import Metric

        metrics = [
            Metric(e.name, e.value, e.timestamp_ms, e.step or 0)
            for e in events
            if e.kind == "metric" and e.value is not None
        ]
        for i in range(0, len(metrics), _MAX_METRICS_PER_BATCH):
            _call(
                self.client.log_batch, self.run_id, metrics=metrics[i : i + _MAX_METRICS_PER_BATCH]
            )

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        _call(self.client.log_batch, self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_dataset(
        self, frame: Any, *, name: str, source: str, target: str, digest: str, context: str
    ) -> None:
        import mlflow.data
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        with warnings.catch_warnings():
            # "source can be interpreted in multiple ways": both readings are local paths.
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_pandas(
                frame, source=source, targets=target, name=name, digest=digest[:36]
            )
        entity = DatasetInput(
            dataset._to_mlflow_entity(), [InputTag(MLFLOW_DATASET_CONTEXT, context)]
        )
        _call(self.client.log_inputs, self.run_id, datasets=[entity])

    def log_model(self, model: Any, *, input_example: Any, output_example: Any) -> LoggedModelRef:
        """Log the torch model with its signature as an MLflow LoggedModel of this run.

        Done step by step with the explicit client: ``mlflow.pytorch.log_model`` resolves the
        experiment and store from MLflow's globals, which would put the model elsewhere.
        """
        import mlflow.pytorch
        from mlflow.entities import LoggedModelOutput, LoggedModelStatus
        from mlflow.models import infer_signature

        with warnings.catch_warnings():
            # The hint about integer columns does not apply: inputs are float32 windows.
            warnings.simplefilter("ignore", UserWarning)
            signature = infer_signature(input_example, output_example)
        logged = _call(
            self.client.create_logged_model,
            self.ref.experiment_id,
            name="model",
            source_run_id=self.run_id,
            model_type="pytorch",
        )
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model"
            mlflow.pytorch.save_model(
                model,
                path,
                signature=signature,
                input_example=input_example,
                # The pickled module's class lives in engage.train.models.
                pip_requirements=_requirements(),
            )
            _call(self.client.log_model_artifacts, logged.model_id, str(path))
        _call(self.client.finalize_logged_model, logged.model_id, LoggedModelStatus.READY)
        _call(self.client.log_outputs, self.run_id, [LoggedModelOutput(logged.model_id, 0)])
        return LoggedModelRef(
            logged.model_id, f"models:/{logged.model_id}", logged.artifact_location
        )

    def end(self, status: str) -> None:
        """status: FINISHED, FAILED or KILLED."""
        try:
            self.client.set_terminated(self.run_id, status=status)
        except Exception as exc:  # the run must not stay RUNNING silently; say so
            raise TrackingError(f"could not mark run {self.run_id} {status}: {exc}") from None


def _requirements() -> list[str]:
    import numpy
    import torch

    import engage

    return [
        f"torch=={torch.__version__.split('+')[0]}",
        f"numpy=={numpy.__version__}",
        f"engage-ml=={engage.__version__}",
    ]


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return fn(*args, **kwargs)
    except MlflowException as exc:
        raise TrackingError(f"MLflow refused {fn.__name__}: {exc.message}") from None
