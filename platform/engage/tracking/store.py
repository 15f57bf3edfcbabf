"""Where runs go: resolving the tracking URI and opening an explicit MLflow client."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engage import env_vars
from engage.errors import TrackingError
from engage.paths import private_dir, private_file
from engage.tracking.sqlite_store import seed_sqlite_store
from engage.tracking.uris import mask_uri


def resolve_tracking_uri(spec_uri: str | None, flag: str | None, home: Path) -> str:
    """flag > MLFLOW_TRACKING_URI > the spec's tracking_uri > SQLite under ``home``."""
    return flag or env_vars.MLFLOW_TRACKING_URI.get() or spec_uri or default_tracking_uri(home)


def default_tracking_uri(home: Path) -> str:
    """The local SQLite store under ``home``, the zero-setup default."""
    return f"sqlite:///{home / 'mlflow.db'}"


def artifact_root_for(uri: str) -> str | None:
    """Artifacts beside a local SQLite store; a server or database chooses its own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").as_uri()
    return None


def open_client(uri: str):
    """An MlflowClient bound to ``uri`` (tracking and registry alike), never the global one.

    Its registry calls run with MLflow's process default pinned to ``uri`` (see
    :func:`pinned_default_uri`): MLflow 3's registry stores look logged models up through a
    bare ``MlflowClient()``, which would otherwise open (and create) ``./mlflow.db``.
    """
    if uri.startswith("sqlite:///"):
        store = Path(uri.removeprefix("sqlite:///"))
        # 0600 before MLflow creates its tables, 0700 where artifact_root_for puts artifacts;
        # best effort: on a read-only folder MLflow's own error says what is wrong.
        seed_sqlite_store(store)  # seconds faster than MLflow's migrations on a new home
        with contextlib.suppress(OSError):
            private_file(store)
            private_dir(store.parent / "artifacts")
    return _client_class()(tracking_uri=uri, registry_uri=uri)


@functools.cache
def _client_class() -> type:
    """MlflowClient with pinned registry calls; built once, on first use (MLflow imports slowly)."""
    from mlflow import MlflowClient

    class PinnedClient(MlflowClient):
        def _get_registry_client(self):
            return _Pinned(super()._get_registry_client(), self.tracking_uri)

        def __reduce__(self):  # a local class: pickle (Ray, multiprocessing) rebuilds it by URI
            return open_client, (self.tracking_uri,)

    return PinnedClient


_PIN_LOCK = threading.RLock()


@contextmanager
def pinned_default_uri(uri: str) -> Iterator[None]:
    """MLflow's process-default tracking URI is ``uri`` inside the block, restored after.

    MLflow 3's file registry store reads every model version through ``MlflowClient()``
    (its own TODO: "rather than relying on global URI"), and its SQL store does so when a
    version is created from a ``models:/`` source. Without a default that is
    ``sqlite:///mlflow.db`` in the working directory, created on first use. The private
    global is set directly, not through ``mlflow.set_tracking_uri``, which would also
    rewrite (and on restore delete) the user's ``MLFLOW_TRACKING_URI``.
    """
    from mlflow.tracking._tracking_service import utils

    with _PIN_LOCK:
        before = getattr(utils, "_tracking_uri", None)
        utils._tracking_uri = uri
        try:
            yield
        finally:
            utils._tracking_uri = before


class _Pinned:
    """A registry client whose every call runs under :func:`pinned_default_uri`."""

    def __init__(self, inner: Any, uri: str) -> None:
        self._inner, self._uri = inner, uri

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            with pinned_default_uri(self._uri):
                return attr(*args, **kwargs)

        return call


def ensure_experiment(client, name: str) -> str:
    """The experiment's id, creating it (artifacts beside a local SQLite store).

    Safe when several processes create the same experiment at once: the one that loses the
    race reads the winner's id.

    Raises
    ------
    TrackingError
        If the experiment is deleted, or MLflow refuses the lookup or the creation.
    """
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
        try:
            return client.create_experiment(name, artifact_location=location)
        except MlflowException as exc:
            # Another process (a second job, a drainer) created it since we looked: use it.
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            again = client.get_experiment_by_name(name)
            if again is None:
                raise
            return again.experiment_id
    except MlflowException as exc:
        shown = mask_uri(client.tracking_uri)
        raise TrackingError(f"MLflow at {shown} refused: {exc.message}") from None


def ui_command(uri: str) -> str:
    """The command that opens the MLflow UI on this store (any password masked)."""
    uri = mask_uri(uri)
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri} --port 5000"


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page in the MLflow UI (any password in ``uri`` masked)."""
    uri = mask_uri(uri)
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
