"""Which registered model version is served, and loading it on a replica.

Resolution (alias or number -> version, signature, classes) runs in the CLI with an explicit
``MlflowClient``; the replica downloads the version's artifacts through that client's URI
and loads the local copy, so nothing touches MLflow's global tracking URI.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import TrackingError
from engage.serve.validation import InputSpec

_CARD = "model_card/inputs.json"


@dataclass(frozen=True)
class ModelTarget:
    """One registered version, with what the serving app needs to know about it."""

    name: str
    version: str
    source: str  # the artifact location of the version's MLflow model
    run_id: str | None
    tracking_uri: str
    signature: dict[str, Any]  # {"inputs": [...], "outputs": [...]} as MLflow writes them
    classes: tuple[str, ...] | None  # class labels (classification), None for regression
    task: str  # "classification" or "regression"
    # The input features in the model's order (the run's model card); None for a version
    # without a card, which /invocations then serves in its tensor forms only.
    features: tuple[str, ...] | None = None

    @property
    def input_spec(self) -> InputSpec:
        """The input shape and dtype the model's MLflow signature accepts."""
        return InputSpec.from_signature(self.signature["inputs"])

    @property
    def label(self) -> str:
        """``NAME/version`` of this target."""
        return f"{self.name}/{self.version}"

    def metadata(self) -> dict[str, Any]:
        """What ``GET /metadata`` answers: name, version, classes, features, signature."""
        return {
            "name": self.name,
            "version": self.version,
            "run_id": self.run_id,
            "task": self.task,
            "classes": list(self.classes) if self.classes else None,
            "features": list(self.features) if self.features else None,
            "signature": self.signature,
        }


def resolve(client: Any, name: str, version: str | None, alias: str | None) -> ModelTarget:
    """The version ``NAME/version`` or ``NAME@alias`` names, with its signature and classes."""
    from engage.tracking.catalog import get_version

    found = get_version(client, name, version, alias)
    uri = client.tracking_uri
    source = client.get_model_version_download_uri(name, str(found.version))
    local = _download(source, uri, "MLmodel")
    signature = _signature(Path(local), name, str(found.version))
    card = _card(found.run_id, uri)
    outputs = signature["outputs"][0]["tensor-spec"]["shape"]
    task = card.get("task") or ("regression" if outputs[-1] == 1 else "classification")
    classes = card.get("classes")
    if task == "classification" and not classes:
        classes = [str(i) for i in range(int(outputs[-1]))]
    features = card.get("features")
    return ModelTarget(
        name,
        str(found.version),
        source,
        found.run_id,
        uri,
        signature,
        tuple(str(c) for c in classes) if classes else None,
        task,
        _feature_names(features, InputSpec.from_signature(signature["inputs"]).features),
    )


def _feature_names(names: Any, width: int) -> tuple[str, ...] | None:
    """The card's feature names when they fit the signature (one name per input column)."""
    if not isinstance(names, list) or len(names) != width:
        return None
    return tuple(str(n) for n in names)


def _download(
    source: str, tracking_uri: str, path: str | None = None, dst: str | None = None
) -> str:
    import mlflow.artifacts

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    uri = source if path is None else f"{source.rstrip('/')}/{path}"
    return mlflow.artifacts.download_artifacts(
        artifact_uri=uri,
        dst_path=dst or tempfile.mkdtemp(prefix="engage-serve-"),
        tracking_uri=tracking_uri,
    )


def _signature(mlmodel: Path, name: str, version: str) -> dict[str, Any]:
    import yaml

    meta = yaml.safe_load(mlmodel.read_text())
    raw = meta.get("signature") or {}
    if not raw.get("inputs") or not raw.get("outputs"):
        raise TrackingError(
            f"model {name}/{version} has no signature; engage serves models logged with one",
            hint="register a version trained by `engage run` (it logs the signature)",
        )
    signature = {"inputs": json.loads(raw["inputs"]), "outputs": json.loads(raw["outputs"])}
    try:
        InputSpec.from_signature(signature["inputs"])
    except (KeyError, ValueError, IndexError) as exc:
        raise TrackingError(f"model {name}/{version}: unsupported signature ({exc})") from None
    return signature


def _card(run_id: str | None, tracking_uri: str) -> dict[str, Any]:
    """The run's model card (features, task, classes); empty when the run has none."""
    if not run_id:
        return {}
    import mlflow.artifacts

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        local = mlflow.artifacts.download_artifacts(
            run_id=run_id,
            artifact_path=_CARD,
            tracking_uri=tracking_uri,
            dst_path=tempfile.mkdtemp(prefix="engage-card-"),
        )
        text = Path(local).read_text()
        return json.loads(text)
    except Exception:  # an older run without a card: classes fall back to indices
        return {}


def logged_example(tracking_uri: str, name: str, version: str) -> Any | None:
    """The input example logged with version ``version`` of ``name``, as parsed JSON.

    MLflow writes ``serving_input_example.json`` (``{"inputs": [...]}``) beside the model,
    older versions only ``input_example.json``; None when the version has neither, or the
    store cannot be read (the example is a convenience: a deploy never fails for it).
    """
    from engage.tracking.store import open_client

    try:
        source = open_client(tracking_uri).get_model_version_download_uri(name, version)
    except Exception:
        return None
    for path in ("serving_input_example.json", "input_example.json"):
        try:
            return json.loads(Path(_download(source, tracking_uri, path)).read_text())
        except Exception:  # absent (MLflow raises its own errors) or not JSON: try the next
            continue
    return None


def load(target: ModelTarget, cache: Path) -> Any:
    """The torch module of ``target``, from a local copy of its artifacts (in eval mode).

    Replicas of one host share the copy; a file lock keeps one from reading what another
    is still writing.
    """
    import fcntl

    import mlflow.pytorch

    dst = cache / f"{target.name}-{target.version}"
    dst.mkdir(parents=True, exist_ok=True)
    with (cache / f"{target.name}-{target.version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            local = _download(target.source, target.tracking_uri, dst=str(dst))
            # A torch.export graph: already in inference mode (and it refuses .eval()).
            return mlflow.pytorch.load_model(local)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
