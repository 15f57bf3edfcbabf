"""A new local store is a copy of an empty, migrated one, and MLflow uses it as its own."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from engage.tracking.sqlite_store import cache_dir, schema_template, seed_sqlite_store
from engage.tracking.store import open_client

# The tests share the user's real cache, as every engage process does: the template is
# built once per machine and MLflow version (a private cache would rebuild it, 5-20 s here).


def test_the_template_is_built_once_per_mlflow_version_and_holds_no_experiment() -> None:
    template = schema_template()
    assert template is not None
    assert template.parent == cache_dir()
    assert template.name.startswith("mlflow-")
    assert template.name.endswith("-empty.db")
    with sqlite3.connect(template) as db:
        assert db.execute("SELECT count(*) FROM experiments").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
    built = template.stat().st_mtime_ns
    assert schema_template() == template
    assert template.stat().st_mtime_ns == built


def test_a_seeded_store_is_private_and_mlflow_makes_its_default_experiment_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "home" / "mlflow.db"
    store.parent.mkdir()
    assert seed_sqlite_store(store)
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert not list(store.parent.glob(".mlflow.db.seed-*"))  # the temporary copy is gone

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root is ./mlruns where it opens
    client = open_client(f"sqlite:///{store}")
    default = client.get_experiment("0")
    assert default.name == "Default"
    # Where the store is opened decides it, not where the template was built.
    assert default.artifact_location == str(tmp_path / "mlruns" / "0")
    assert client.create_experiment("first") == "1"
    run = client.create_run("1")
    client.log_metric(run.info.run_id, "loss", 0.5, step=1)
    assert client.get_metric_history(run.info.run_id, "loss")[0].value == 0.5


def test_an_existing_file_is_never_replaced_even_when_empty(tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"")  # another process may be creating its tables right now
    assert not seed_sqlite_store(store)
    assert store.read_bytes() == b""


def test_without_a_usable_cache_mlflow_creates_the_store_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    store = tmp_path / "mlflow.db"
    assert schema_template() is None
    assert not seed_sqlite_store(store)
    assert not store.exists()
    client = open_client(f"sqlite:///{store}")
    assert client.create_experiment("first") == "1"
