"""What each spooled entry does on the MLflow server. Every operation is idempotent:
it first looks for what an earlier, interrupted attempt may already have created."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engage.paths import private_dir
from engage.tracking.catalog import CANDIDATE_ALIAS
from engage.tracking.spool import Entry, Spool, SpoolRun

LOCAL_ID_TAG = "engage.local_run_id"
OP_TAG = "engage.op"


def client_for(uri: str) -> Any:
    """The MLflow client the drainer sends to ``uri`` with (one per URI)."""
    from engage.tracking.store import open_client

    return open_client(uri)


def create_run(client: Any, run: SpoolRun, parent_server_id: str | None) -> tuple[str, str]:
    """Create ``run`` on the server (or find the one an interrupted attempt created)."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

    from engage.tracking.store import ensure_experiment

    experiment_id = ensure_experiment(client, run.experiment)
    existing = client.search_runs(
        [experiment_id], filter_string=f"tags.`{LOCAL_ID_TAG}` = '{run.local_id}'", max_results=1
    )
    if existing:
        return existing[0].info.run_id, experiment_id
    tags = {**run.tags, LOCAL_ID_TAG: run.local_id, MLFLOW_RUN_NAME: run.run_name}
    if parent_server_id:
        tags[MLFLOW_PARENT_RUN_ID] = parent_server_id
    created = client.create_run(
        experiment_id, start_time=run.start_ms, tags=tags, run_name=run.run_name
    )
    return created.info.run_id, experiment_id


def log_points(client: Any, run_id: str, batch: list[Entry]) -> None:
    """Send metric, param and tag entries of one run as one ``log_batch`` request."""
    from mlflow.entities import Metric, Param, RunTag

    metrics = [Metric(e.key, e.value, e.ts, e.step or 0) for e in batch if e.kind == "metric"]
    params = [Param(e.key, e.value) for e in batch if e.kind == "param"]
    tags = [RunTag(e.key, e.value) for e in batch if e.kind == "tag"]
    client.log_batch(run_id, metrics=metrics, params=params, tags=tags, synchronous=True)


def apply_op(client: Any, run: SpoolRun, entry: Entry, spool: Spool) -> dict[str, Any] | None:
    """Carry out one operation entry (text, artifacts, dataset, model, register) idempotently; returns what later entries need of it."""
    handler = _HANDLERS[entry.kind]
    return handler(client, run, entry.value, entry, spool)


def _text(client: Any, run: SpoolRun, p: dict, entry: Entry, spool: Spool) -> None:
    client.log_text(run.server_id, p["text"], p["artifact_file"])


def _artifacts(client: Any, run: SpoolRun, p: dict, entry: Entry, spool: Spool) -> None:
    # Idempotent as it is: sending the same files again overwrites them in place.
    client.log_artifacts(run.server_id, p["local_dir"], p["artifact_path"])


def _dataset(client: Any, run: SpoolRun, p: dict, entry: Entry, spool: Spool) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    dataset = Dataset(**p["dataset"])
    tags = [InputTag(k, v) for k, v in p["tags"].items()]
    client.log_inputs(run.server_id, datasets=[DatasetInput(dataset, tags)])


def _model(client: Any, run: SpoolRun, p: dict, entry: Entry, spool: Spool) -> dict[str, Any]:
    """A LoggedModel of the run from a model folder saved in the spool."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    op_key = f"{run.local_id}:{entry.seq}"
    found = client.search_logged_models(
        experiment_ids=[run.experiment_id],
        filter_string=f"tags.`{OP_TAG}` = '{op_key}'",
        max_results=1,
    )
    model = found[0] if found else None
    if model is None:
        model = client.create_logged_model(
            run.experiment_id,
            name=p["name"],
            source_run_id=run.server_id,
            tags={OP_TAG: op_key},
            model_type=p.get("model_type"),
        )
    if model.status != LoggedModelStatus.READY:
        client.log_model_artifacts(model.model_id, p["local_dir"])
        client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    client.log_outputs(run.server_id, [LoggedModelOutput(model.model_id, p.get("step", 0))])
    return {"model_id": model.model_id, "artifact_location": model.artifact_location}


def _register(client: Any, run: SpoolRun, p: dict, entry: Entry, spool: Spool) -> dict[str, Any]:
    """A model version of the logged model, with alias ``candidate``."""
    from mlflow.exceptions import MlflowException

    model = json.loads(spool.result(p["model_seq"]) or "{}")
    if "model_id" not in model:
        raise MlflowException(
            f"the model to register (entry {p['model_seq']}) was not logged",
            error_code="INVALID_STATE",
        )
    name, op_key = p["model_name"], f"{run.local_id}:{entry.seq}"
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, description="Registered by engage.")
    found = client.search_model_versions(f"name = '{name}' and tags.`{OP_TAG}` = '{op_key}'")
    if found:
        version = found[0]
    else:
        # The artifact location, not models:/<id>: MLflow's SQL registry would resolve that
        # URI through its global tracking URI rather than this client's.
        version = client.create_model_version(
            name,
            source=model["artifact_location"],
            run_id=run.server_id,
            tags={**p.get("tags", {}), OP_TAG: op_key},
            model_id=model["model_id"],
        )
    client.set_registered_model_alias(name, CANDIDATE_ALIAS, version.version)
    return {"name": name, "version": str(version.version), "alias": CANDIDATE_ALIAS}


_HANDLERS = {
    "text": _text,
    "artifacts": _artifacts,
    "dataset": _dataset,
    "model": _model,
    "register": _register,
}


def saved_model_dir(spool: Spool, run_local_id: str) -> Path:
    """Where a run's model is saved in the spool until the drainer sends it."""
    path = spool.files / run_local_id / "model"
    private_dir(path.parent)
    return path


def artifacts_dir(spool: Spool, run_local_id: str, artifact_path: str) -> Path:
    """Where files spooled as artifacts under ``artifact_path`` wait for the drainer."""
    return private_dir(spool.files / run_local_id / "artifacts" / artifact_path)
