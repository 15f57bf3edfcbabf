"""Credentials never printed or stored (issue 11 item 6): masked URIs, resolved at send time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engage.errors import TrackingError
from engage.tracking import Spool, mask_uri, resolve_uri
from engage.tracking.store import run_url, ui_command
from engage.tracking.uris import remember


@pytest.mark.parametrize(
    ("uri", "masked"),
    [
        ("http://alice:s3cret@mlflow:5000", "http://alice:***@mlflow:5000"),
        (
            "postgresql+psycopg2://engage:pw@127.0.0.1:5432/mlflow",
            "postgresql+psycopg2://engage:***@127.0.0.1:5432/mlflow",
        ),
        ("http://mlflow:5000", "http://mlflow:5000"),
        ("sqlite:////home/u/.engage/mlflow.db", "sqlite:////home/u/.engage/mlflow.db"),
        ("http://alice@mlflow", "http://alice@mlflow"),
    ],
)
def test_mask_uri_hides_only_the_password(uri: str, masked: str) -> None:
    assert mask_uri(uri) == masked


def test_the_mlflow_ui_hint_and_run_url_never_print_the_password() -> None:
    uri = "http://alice:s3cret@mlflow:5000"

    shown = ui_command(uri) + run_url(uri, "1", "abc")
    db_hint = ui_command("postgresql://engage:s3cret@db/mlflow")

    assert "s3cret" not in shown + db_hint
    assert "alice:***@mlflow:5000" in shown


def test_the_spool_stores_the_uri_without_its_password(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")

    run = spool.create_run("http://alice:s3cret-spool@127.0.0.1:9", "e", "r", {})

    files = [tmp_path / "spool.db", tmp_path / "spool.db-wal"]
    assert not any(b"s3cret-spool" in f.read_bytes() for f in files if f.exists())
    spool.close()
    with sqlite3.connect(tmp_path / "spool.db") as db:
        (stored,) = db.execute(
            "SELECT tracking_uri FROM runs WHERE local_id = ?", (run,)
        ).fetchone()
    assert stored == "http://alice:***@127.0.0.1:9"
    # ... while this process, which was given it, can still send there.
    assert resolve_uri(stored) == "http://alice:s3cret-spool@127.0.0.1:9"


def test_a_later_process_takes_the_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stored = "http://bob:***@tracking.example:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)

    with pytest.raises(TrackingError, match="without its password"):
        resolve_uri(stored)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://bob:from-env@tracking.example:5000")
    assert resolve_uri(stored) == "http://bob:from-env@tracking.example:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "p@ss/word")
    assert resolve_uri(stored) == "http://bob:p%40ss%2Fword@tracking.example:5000"


def test_remember_returns_the_masked_form() -> None:
    assert remember("http://c:d@h:1") == "http://c:***@h:1"
    assert resolve_uri("http://c:***@h:1") == "http://c:d@h:1"


def test_passwords_in_error_text_are_masked() -> None:
    from engage.tracking.uris import mask_text

    text = "API request to http://u:pw1@h:5000/api failed; db postgresql://e:pw2@db/x down"

    assert mask_text(text) == (
        "API request to http://u:***@h:5000/api failed; db postgresql://e:***@db/x down"
    )


def test_a_stored_uri_without_a_known_password_is_a_permanent_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engage.tracking import Drainer

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    spool = Spool(tmp_path / "spool.db")
    spool.create_run("http://carol:***@127.0.0.1:9", "e", "r", {})  # as a past job stored it

    fault = Drainer(spool.path).drain_once().fault

    assert fault is not None
    assert "MLFLOW_TRACKING_PASSWORD" in fault.hint
