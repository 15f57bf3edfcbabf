"""`engage run --address` when no cluster is there: a fast, explained failure, not Ray's retry loop."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import mlflow
import pytest

pytestmark = pytest.mark.e2e


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nobody listens once the socket is closed


def test_unreachable_address_exits_4_fast_with_a_message(run_engage, tmp_path: Path) -> None:
    # Arrange
    address = f"127.0.0.1:{_closed_port()}"

    # Act
    started = time.monotonic()
    done = run_engage("run", "pipelines/quickstart.yaml", "--address", address, timeout=60)
    seconds = time.monotonic() - started

    # Assert: exit code 4 (ClusterError), well before Ray's own ~20 s connect retries.
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert seconds < 30
    assert f"no Ray cluster answers at {address}" in done.stderr
    assert "hint:" in done.stderr
    assert "Traceback" not in done.stderr
    # Whatever run the attempt opened is closed as FAILED, not left RUNNING.
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / '.engage'}/mlflow.db")
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], max_results=10
    )
    assert all(r.info.status == "FAILED" for r in runs), [r.info.status for r in runs]
