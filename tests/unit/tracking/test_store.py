"""Where runs go: tracking-URI precedence and experiments in a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engage.errors import TrackingError
from engage.tracking.store import (
    artifact_root_for,
    default_tracking_uri,
    ensure_experiment,
    resolve_tracking_uri,
    ui_command,
)

HOME = Path("/home/u/.engage")


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return monkeypatch


def test_flag_beats_env_and_spec(no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv("MLFLOW_TRACKING_URI", "http://env:5000")

    uri = resolve_tracking_uri("http://spec:5000", "http://flag:5000", HOME)

    assert uri == "http://flag:5000"


def test_env_beats_spec(no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv("MLFLOW_TRACKING_URI", "http://env:5000")

    assert resolve_tracking_uri("http://spec:5000", None, HOME) == "http://env:5000"


def test_empty_env_counts_as_unset(no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv("MLFLOW_TRACKING_URI", "")

    assert resolve_tracking_uri("http://spec:5000", None, HOME) == "http://spec:5000"


def test_spec_beats_default(no_env: pytest.MonkeyPatch) -> None:
    assert resolve_tracking_uri("http://spec:5000", None, HOME) == "http://spec:5000"


def test_default_is_sqlite_under_home(no_env: pytest.MonkeyPatch) -> None:
    uri = resolve_tracking_uri(None, None, HOME)

    assert uri == "sqlite:////home/u/.engage/mlflow.db" == default_tracking_uri(HOME)


def test_artifacts_go_beside_a_sqlite_store_and_servers_choose_their_own() -> None:
    assert artifact_root_for("sqlite:////a/b/mlflow.db") == "file:///a/b/artifacts"
    assert artifact_root_for("http://127.0.0.1:5000") is None
    assert artifact_root_for("postgresql://u@db/mlflow") is None


def test_ui_command_points_at_the_store() -> None:
    assert ui_command("sqlite:////a/mlflow.db").endswith(
        "--backend-store-uri sqlite:////a/mlflow.db --port 5000"
    )
    assert ui_command("http://host:5000") == "open http://host:5000"


def test_ensure_experiment_creates_it_with_artifacts_under_home(
    client: Any, store_home: Path
) -> None:
    experiment_id = ensure_experiment(client, "fresh")

    experiment = client.get_experiment(experiment_id)
    assert experiment.name == "fresh"
    assert experiment.artifact_location == (store_home / "artifacts").as_uri()
    assert (store_home / "mlflow.db").is_file()


def test_ensure_experiment_reuses_an_existing_one(client: Any, store_home: Path) -> None:
    first = ensure_experiment(client, "twice")

    second = ensure_experiment(client, "twice")

    assert second == first
    assert len([e for e in client.search_experiments() if e.name == "twice"]) == 1


def test_ensure_experiment_refuses_a_deleted_one(client: Any, store_home: Path) -> None:
    client.delete_experiment(ensure_experiment(client, "gone"))

    with pytest.raises(TrackingError, match="'gone' is deleted") as caught:
        ensure_experiment(client, "gone")

    assert "tracking.experiment" in caught.value.hint


def test_ensure_experiment_survives_another_process_creating_it_first(client: Any) -> None:
    """The lookup finds nothing, another writer creates the experiment, then ours is refused
    with RESOURCE_ALREADY_EXISTS: engage must read the winner's id, not fail the job."""

    class LateLookup:
        """The real client, but its first lookup runs before the other process's create."""

        def __init__(self, real: Any) -> None:
            self._real = real
            self.tracking_uri = real.tracking_uri
            self._looked = False

        def get_experiment_by_name(self, name: str) -> Any:
            if not self._looked:
                self._looked = True
                found = self._real.get_experiment_by_name(name)
                self._real.create_experiment(name)  # the other process wins the race
                return found
            return self._real.get_experiment_by_name(name)

        def create_experiment(self, name: str, **kwargs: Any) -> str:
            return self._real.create_experiment(name, **kwargs)

    racing = LateLookup(client)
    experiment_id = ensure_experiment(racing, "raced")
    assert experiment_id == client.get_experiment_by_name("raced").experiment_id
