"""One MLflow run per pipeline run, written through the durable spool.

Nothing here talks to MLflow: every call appends to the spool and returns; the drainer
sends it. So a tracking outage never stops or slows a job, and a killed job's points are
sent by the next engage command or ``engage sync``.
"""

from __future__ import annotations

import json
import operator
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import TrackingError
from engage.events import Event
from engage.tracking import _ops
from engage.tracking.dataset_schema import dataset_schema_json
from engage.tracking.lineage import capture_lineage, flatten
from engage.tracking.registry import Registration
from engage.tracking.spool import Spool

_MAX_PARAM_VALUE = 6000
_EVENT_FIELDS = operator.attrgetter("kind", "name", "value", "step", "timestamp_ms")


@dataclass(frozen=True)
class RunIds:
    """Engage's local id, and the MLflow ids once the server has the run."""

    local_id: str
    run_id: str | None
    experiment_id: str | None


class PipelineRun:
    """Creates the run, spools what the stages produce, and ends it with the right status."""

    def __init__(self, spool: Spool, local_id: str, tracking_uri: str, experiment: str) -> None:
        self.spool = spool
        self.local_id = local_id
        self.tracking_uri = tracking_uri
        self.experiment = experiment

    @classmethod
    def start(
        cls,
        spool: Spool,
        tracking_uri: str,
        experiment: str,
        run_name: str,
        tags: Mapping[str, str],
        where: Path,
        parent: PipelineRun | None = None,
    ) -> PipelineRun:
        """Spool a new run; a top-level run also records its lineage (git, packages, machine)."""
        from mlflow.utils.mlflow_tags import MLFLOW_SOURCE_NAME

        lineage = capture_lineage(where) if parent is None else None
        all_tags = {**(lineage.tags() if lineage else {}), MLFLOW_SOURCE_NAME: "engage", **tags}
        local_id = spool.create_run(
            tracking_uri, experiment, run_name, all_tags, parent.local_id if parent else None
        )
        run = cls(spool, local_id, tracking_uri, experiment)
        for artifact_file, text in (lineage.artifacts() if lineage else {}).items():
            run.log_text(text, artifact_file)
        return run

    def child(self, run_name: str, tags: Mapping[str, str], where: Path) -> PipelineRun:
        """A nested run (a tuning trial, a federated round) under this one."""
        return PipelineRun.start(
            self.spool, self.tracking_uri, self.experiment, run_name, tags, where, self
        )

    def ids(self) -> RunIds:
        """The run's local id and, once the drainer has created it, its MLflow ids."""
        run = self.spool.run(self.local_id)
        return RunIds(run.local_id, run.server_id, run.experiment_id)

    def wait_for_run_id(self, timeout_s: float, give_up: Callable[[], bool] | None = None) -> str:
        """The MLflow run id if the drainer creates the run within ``timeout_s``, else the local id.

        ``give_up`` is polled too: when it returns True (the drainer reports MLflow down or a
        fault) the wait ends at once with the local id.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not (give_up is not None and give_up()):
            if (server_id := self.spool.run(self.local_id).server_id) is not None:
                return server_id
            time.sleep(0.05)
        return self.run_id

    @property
    def run_id(self) -> str:
        """The MLflow run id once known, else the local id (mapped when the server has it)."""
        return self.spool.run(self.local_id).run_id

    def log_params(self, resolved_spec: Mapping[str, Any]) -> None:
        """Spool the flattened, resolved spec as the run's parameters."""
        points = [
            ("param", k, v[:_MAX_PARAM_VALUE], None, _now())
            for k, v in flatten(resolved_spec).items()
        ]
        self.spool.append_points(self.local_id, points)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Spool tags on the run."""
        self.spool.append_points(
            self.local_id, [("tag", k, str(v), None, _now()) for k, v in tags.items()]
        )

    def log_metric_events(self, events: Sequence[Event]) -> None:
        """Spool the metric events among ``events`` with their own timestamp and step (0
        for none)."""
        if not events:
            return
        # The spool takes columns: transposed in C, no tuple per point built in Python
        # (3 µs of a 10-point step on the driver's writer, issue 11). The usual batch holds
        # only metrics with values; anything else is filtered out first.
        kinds, keys, values, steps, stamps = zip(*map(_EVENT_FIELDS, events), strict=True)
        if kinds.count("metric") != len(kinds) or None in values:
            kept = [e for e in events if e.kind == "metric" and e.value is not None]
            if not kept:
                return
            _, keys, values, steps, stamps = zip(*map(_EVENT_FIELDS, kept), strict=True)
        if None in steps:
            steps = [0 if s is None else s for s in steps]  # MLflow wants an int: 0 for none
        self.spool.append_metrics(self.local_id, keys, values, steps, stamps)

    def log_metric_columns(
        self,
        keys: Sequence[str],
        values: Sequence[float],
        steps: Sequence[int | None],
        stamps: Sequence[int],
    ) -> None:
        """Spool metric points given as columns (step 0 for none): what
        :meth:`log_metric_events` spools for the same points, without an Event per point
        (the driver's :class:`~engage.tracking.sinks.MetricSink` reading the hub's rows)."""
        if not keys:
            return
        if None in steps:
            steps = [0 if s is None else s for s in steps]  # MLflow wants an int: 0 for none
        self.spool.append_metrics(self.local_id, keys, values, steps, stamps)

    def log_text(self, text: str, artifact_file: str) -> None:
        """Spool a text artifact of the run."""
        self.spool.append_op(self.local_id, "text", {"text": text, "artifact_file": artifact_file})

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        """Spool a JSON artifact of the run."""
        self.log_text(json.dumps(data, indent=2, default=str), artifact_file)

    def log_artifacts(self, local_dir: Path, artifact_path: str) -> int:
        """Spool the files of ``local_dir`` as run artifacts under ``artifact_path``.

        The files are copied into the spool first (unless already there), so the caller's
        folder may go away before the drainer sends them. Returns the entry's seq.
        """
        with _spool_files(self.spool.files):
            target = _ops.artifacts_dir(self.spool, self.local_id, artifact_path)
            if Path(local_dir).resolve() != target.resolve():
                shutil.copytree(local_dir, target, dirs_exist_ok=True)
        payload = {"local_dir": str(target), "artifact_path": artifact_path}
        return self.spool.append_op(self.local_id, "artifacts", payload)

    def log_dataset(
        self, frame: Any, *, name: str, source: str, target: str, digest: str, context: str
    ) -> None:
        """Spool the run's dataset input (name, digest, schema, source and context).

        The fields are those of ``mlflow.data.from_pandas(frame, ...)``'s entity; the schema
        comes from :func:`~engage.tracking.dataset_schema.dataset_schema_json` (the same
        schema, without a Python call per value).
        """
        import mlflow.data
        from mlflow.data.dataset import Dataset
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        with warnings.catch_warnings():
            # "source can be interpreted in multiple ways": both readings are local paths.
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_pandas(
                frame, source=source, targets=target, name=name, digest=digest[:36]
            )
            schema = dataset_schema_json(frame, source)
        # The base class's fields (name, digest, source, source_type): the pandas dataset's
        # own to_dict would infer the schema again, value by value.
        fields = Dataset.to_dict(dataset)
        payload = {
            "dataset": {
                "name": fields["name"],
                "digest": fields["digest"],
                "source_type": fields["source_type"],
                "source": fields["source"],
                "schema": schema,
                "profile": json.dumps(dataset.profile),
            },
            "tags": {MLFLOW_DATASET_CONTEXT: context},
        }
        self.spool.append_op(self.local_id, "dataset", payload)

    def log_model(self, model: Any, *, input_example: Any, output_example: Any) -> int:
        """Save the torch model with its signature into the spool; returns the entry's seq."""
        import mlflow.pytorch
        from mlflow.models import infer_signature

        with warnings.catch_warnings():
            # The hint about integer columns does not apply: inputs are float32 windows.
            warnings.simplefilter("ignore", UserWarning)
            signature = infer_signature(input_example, output_example)
        with _spool_files(self.spool.files):
            path = _ops.saved_model_dir(self.spool, self.local_id)
            shutil.rmtree(path, ignore_errors=True)
            mlflow.pytorch.save_model(
                model,
                path,
                signature=signature,
                input_example=input_example,
                # A torch.export graph: loading it needs torch, not engage's model classes.
                serialization_format="pt2",
                pip_requirements=model_requirements(),
            )
        payload = {"name": "model", "local_dir": str(path), "model_type": "pytorch"}
        return self.spool.append_op(self.local_id, "model", payload)

    def register(self, model_name: str, model_seq: int, tags: Mapping[str, str]) -> int:
        """Spool the registration of the model logged as entry ``model_seq``."""
        payload = {"model_name": model_name, "model_seq": model_seq, "tags": dict(tags)}
        return self.spool.append_op(self.local_id, "register", payload)

    def registration(self, register_seq: int) -> Registration | None:
        """The registered version, once the drainer has created it."""
        result = self.spool.result(register_seq)
        if not result:
            return None
        data = json.loads(result)
        return (
            Registration(data["name"], data["version"], data["alias"])
            if "version" in data
            else None
        )

    def model_uri(self, model_seq: int) -> str | None:
        """The logged model's ``models:/`` URI once the drainer has logged it, else None."""
        result = self.spool.result(model_seq)
        return f"models:/{json.loads(result)['model_id']}" if result else None

    def end(self, status: str) -> None:
        """Spool the run's end; status: FINISHED, FAILED or KILLED (sent after all before it).

        Raises
        ------
        TrackingError
            The spool cannot record a FINISHED end. For FAILED or KILLED the run is already
            ending on another error, the one the user must see: a spool that cannot record
            the end (a full disk, typically) is then a warning, and the run stays RUNNING
            in MLflow.
        """
        try:
            self.spool.end_run(self.local_id, status)
        except TrackingError as exc:
            if status == "FINISHED":
                raise
            warnings.warn(f"could not record the run's {status} end: {exc}", stacklevel=2)


@contextmanager
def _spool_files(folder: Path) -> Iterator[None]:
    """Files copied into the spool: a full disk is a TrackingError (exit 5), not a crash."""
    try:
        yield
    except OSError as exc:
        raise TrackingError(
            f"cannot save files into the tracking spool at {folder}: {exc}",
            hint="free disk space or fix permissions; the run's points are in the spool",
        ) from None


def _now() -> int:
    from engage.tracking.spool import now_ms

    return now_ms()


def model_requirements() -> list[str]:
    """The pip requirements logged with every engage model: the torch and numpy in use.

    Named rather than left to MLflow, which infers them by loading the model in a
    subprocess (about 20 s a model on two loaded cores).
    """
    import numpy
    import torch

    return [f"torch=={torch.__version__.split('+')[0]}", f"numpy=={numpy.__version__}"]
