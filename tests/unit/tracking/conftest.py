"""A real SQLite MLflow store per test file (creating one costs seconds, so share it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engage.tracking import ensure_experiment, open_client


@pytest.fixture(scope="module")
def store_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engage-home")


@pytest.fixture(scope="module")
def client(store_home: Path) -> Any:
    return open_client(f"sqlite:///{store_home / 'mlflow.db'}")


@pytest.fixture(scope="module")
def experiment_id(client: Any, store_home: Path) -> str:
    return ensure_experiment(client, "unit-tests")
