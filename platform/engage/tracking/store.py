"""Where runs go: resolving the tracking URI and opening an explicit MLflow client."""

from __future__ import annotations

from pathlib import Path

from engage import env_vars
from engage.errors import TrackingError


def resolve_tracking_uri(spec_uri: str | None, flag: str | None, home: Path) -> str:
    """flag > MLFLOW_TRACKING_URI > the spec's tracking_uri > SQLite under ``home``."""
    return flag or env_vars.MLFLOW_TRACKING_URI.get() or spec_uri or default_tracking_uri(home)


def default_tracking_uri(home: Path) -> str:
    return f"sqlite:///{home / 'mlflow.db'}"


def artifact_root_for(uri: str) -> str | None:
    """Artifacts beside a local SQLite store; a server or database chooses its own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").as_uri()
    return None


def open_client(uri: str):
    """An MlflowClient bound to ``uri`` (tracking and registry alike), never the global one."""
    from mlflow import MlflowClient

    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def ensure_experiment(client, name: str) -> str:
    """The experiment's id, creating it (artifacts beside a local SQLite store)."""
    from mlflow.exceptions import MlflowException

    try:
        found = client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                raise TrackingError(
                    f"MLflow experiment {name!r} is deleted",
                    hint="restore it in the MLflow UI or set tracking.experiment to a new name",
                )
            return found.experiment_id
        location = artifact_root_for(client.tracking_uri)
        return client.create_experiment(name, artifact_location=location)
    except MlflowException as exc:
        raise TrackingError(f"MLflow at {client.tracking_uri} refused: {exc.message}") from None


def ui_command(uri: str) -> str:
    """The command that opens the MLflow UI on this store."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri} --port 5000"


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
