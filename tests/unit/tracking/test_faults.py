"""Faults classified (issue 11 item 4): permanent ones stop with the repair, the rest retry.

Real files and a real HTTP listener: a half-created MLflow SQLite store, a spool with a
corrupted page, a server answering 401 or 503.
"""

from __future__ import annotations

import http.server
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from engage.errors import TrackingError
from engage.tracking import Drainer, Spool, SpoolDamaged, repair

POINTS = 3_000


def half_created_store(full_store: Path, target: Path) -> Path:
    """A store as a job killed during MLflow's first migration leaves it: some tables only."""
    with sqlite3.connect(full_store) as full:
        ddl = [
            row[0]
            for row in full.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table'"
                " AND name IN ('experiments', 'runs', 'tags')"
            )
        ]
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(target) as half:
        for statement in ddl:
            half.execute(statement)
    return target


def make_store(path: Path) -> Path:
    """A complete MLflow SQLite store at ``path`` (MLflow creates every table)."""
    from engage.tracking import ensure_experiment, open_client

    path.parent.mkdir(parents=True, exist_ok=True)
    ensure_experiment(open_client(f"sqlite:///{path}"), "complete")
    return path


@pytest.fixture
def half_store(store_home: Path, experiment_id: str, tmp_path: Path) -> Path:
    return half_created_store(store_home / "mlflow.db", tmp_path / "half" / "mlflow.db")


def _spool_with_points(path: Path, uri: str, points: int = POINTS) -> str:
    spool = Spool(path)
    run = spool.create_run(uri, "faults", "r", {})
    for start in range(0, points, 250):
        stop = min(start + 250, points)
        spool.append_points(
            run, [("metric", "m", float(i), i, 1_000 + i) for i in range(start, stop)]
        )
    spool.close()
    return run


def test_a_half_created_store_stops_the_drainer_naming_the_file_and_the_repair(
    half_store: Path, tmp_path: Path
) -> None:
    _spool_with_points(tmp_path / "spool.db", f"sqlite:///{half_store}", 10)
    drainer = Drainer(tmp_path / "spool.db", warn=lambda m: None)

    status = drainer.drain_once()

    assert status.fault is not None, status.error
    assert str(half_store) in status.fault.message
    assert "engage sync --repair" in status.fault.hint
    with pytest.raises(TrackingError) as caught:
        drainer.flush(timeout_s=5)
    assert caught.value.exit_code == 5
    drainer.stop()


def test_repair_moves_a_half_created_store_aside_and_rebuilds_it_from_the_spool(
    half_store: Path, tmp_path: Path
) -> None:
    uri = f"sqlite:///{half_store}"
    run = _spool_with_points(tmp_path / "spool.db", uri, 10)
    failed = Drainer(tmp_path / "spool.db")
    failed.drain_once()
    failed.stop()

    report = repair(tmp_path / "spool.db")
    drainer = Drainer(tmp_path / "spool.db")
    drained = drainer.flush(timeout_s=120)

    assert drained, drainer.status
    (backup,) = report.store_backups
    assert backup.exists()
    assert backup.name.startswith("mlflow.db.broken-")
    server_id = drainer.spool.run(run).server_id
    assert len(MlflowClient(uri).get_metric_history(server_id, "m")) == 10
    drainer.stop()


def corrupt_a_page(path: Path) -> None:
    """Overwrite one leaf page in the middle of the spool's outbox with garbage."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        leaves = [
            row[0]
            for row in db.execute(
                "SELECT pageno FROM dbstat WHERE name = 'outbox' AND pagetype = 'leaf'"
                " ORDER BY pageno"
            )
        ]
    with open(path, "r+b") as f:
        f.seek(page_size * (leaves[len(leaves) // 2] - 1))
        f.write(b"\xa5" * page_size)


def test_a_corrupted_spool_page_is_reported_by_the_drainer_thread_not_swallowed(
    tmp_path: Path, store_home: Path
) -> None:
    path = tmp_path / "spool.db"
    _spool_with_points(path, f"sqlite:///{store_home / 'mlflow.db'}")
    corrupt_a_page(path)
    warnings: list[str] = []

    drainer = Drainer(path, warn=warnings.append, in_process=True).start(interval_s=0.05)
    deadline = time.monotonic() + 60
    while drainer.status.fault is None and time.monotonic() < deadline:
        time.sleep(0.1)

    assert isinstance(drainer.status.fault, SpoolDamaged), (drainer.status, warnings)
    assert any(str(path) in w and "engage sync --repair" in w for w in warnings), warnings
    with pytest.raises(SpoolDamaged):
        drainer.flush(timeout_s=1)
    drainer.stop()


def test_repair_salvages_every_readable_entry_of_a_corrupted_spool(
    tmp_path: Path, store_home: Path
) -> None:
    path = tmp_path / "spool.db"
    run = _spool_with_points(path, f"sqlite:///{store_home / 'mlflow.db'}")
    corrupt_a_page(path)

    report = repair(path)

    spool = Spool(path)
    kept = spool.pending(run, 10 * POINTS)
    assert report.spool_backup is not None
    assert report.spool_backup.exists()
    assert 0 < report.lost < POINTS
    assert len(kept) == report.salvaged == POINTS - report.lost
    assert all(e.value == float(e.step) and e.ts == 1_000 + e.step for e in kept)
    assert spool.integrity_check() == "ok"
    spool.close()


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 401

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(self.status)  # as MLflow's basic-auth app or a proxy answers
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"You are not authenticated." if self.status < 500 else b"Unavailable")

    do_GET = do_POST = _reply

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[Any]:
    servers = []

    def start(status: int) -> str:
        handler = type("Handler", (_Answer,), {"status": status})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_permanent(answering, tmp_path: Path, status: int) -> None:
    _spool_with_points(tmp_path / "spool.db", answering(status), 5)
    drainer = Drainer(tmp_path / "spool.db", warn=lambda m: None)

    fault = drainer.drain_once().fault

    assert fault is not None
    assert "credentials" in fault.message
    assert "MLFLOW_TRACKING_PASSWORD" in fault.hint
    drainer.stop()


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_retried_with_the_lag_shown(
    answering, tmp_path: Path, status: int
) -> None:
    _spool_with_points(tmp_path / "spool.db", answering(status), 5)
    warnings: list[str] = []
    drainer = Drainer(tmp_path / "spool.db", warn=warnings.append)

    status_after = drainer.drain_once()

    assert status_after.fault is None
    assert status_after.error is not None
    assert any("5 waiting" in w for w in warnings), warnings
    assert drainer.flush(timeout_s=1) is False  # retried, not raised
    drainer.stop()


@pytest.mark.parametrize("scheme", ["file", "nosuchscheme"])
def test_a_tracking_uri_mlflow_refuses_to_open_is_permanent(
    tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MLflow 3 refuses a file store (maintenance mode) unless MLFLOW_ALLOW_FILE_STORE is set,
    # and has no store for an unknown scheme: no wait makes either work, so the drainer must
    # not report "unreachable" and retry forever (a user's `--tracking-uri file:///...` did).
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = f"{scheme}://{tmp_path / 'mlruns'}"
    _spool_with_points(tmp_path / "spool.db", uri, 5)
    drainer = Drainer(tmp_path / "spool.db", warn=lambda m: None)

    fault = drainer.drain_once().fault

    assert fault is not None, "retried as an outage"
    assert uri in fault.message
    assert "sqlite:///" in fault.hint
    assert "nothing has been dropped" in fault.hint
    drainer.stop()
