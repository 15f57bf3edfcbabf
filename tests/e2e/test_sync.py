"""`engage sync` after a crash, and a spool folder engage cannot write, as a user meets them."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow import MlflowClient

pytestmark = pytest.mark.e2e

_HARNESS = Path(__file__).parents[1] / "integration" / "tracking" / "_harness.py"
METRICS = 10


def _harness():
    """tests/integration/tracking/_harness.py (the MLflow server and job helpers)."""
    spec = importlib.util.spec_from_file_location("_tracking_harness", _HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


harness = _harness()


@pytest.fixture
def server(tmp_path: Path):
    """A real `mlflow server` on SQLite, not started yet; SIGKILLed at teardown."""
    made = harness.MlflowServer(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "server")
    yield made
    made.kill()


def _integrity(spool: Path) -> str:
    with sqlite3.connect(spool) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def test_sync_after_a_killed_job_sends_every_acknowledged_point_once(
    run_engage, server, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    job = harness.Job.start(home, server.url, "crash", "--seconds", "8")  # server down throughout
    try:
        job.wait_acked(3_000)
    finally:
        job.kill()  # SIGKILL, mid-run: no end, no final flush
    acked = job.acknowledged_points()

    still_down = run_engage("sync", "--home", str(home), "--timeout", "3", timeout=120)
    server.start()
    synced = run_engage("sync", "--home", str(home), timeout=180)

    assert still_down.returncode == 5, still_down.stdout + still_down.stderr
    assert "could not be sent" in still_down.stderr
    assert "nothing has been dropped" in still_down.stderr
    assert "Traceback" not in still_down.stdout + still_down.stderr
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert _integrity(home / "spool.db") == "ok"
    client = MlflowClient(server.url)
    (run,) = client.search_runs([client.get_experiment_by_name("crash").experiment_id])
    stored = harness.metric_rows(client, run.info.run_id, [f"m{k}" for k in range(METRICS)])
    for key, rows in stored.items():
        steps = [step for step, _, _ in rows]
        assert not [s for s, n in Counter(steps).items() if n > 1], f"{key}: duplicates"
        assert steps == list(range(len(steps))), f"{key}: a gap in the spooled steps"
        assert all(value == int(key[1:]) * 1000 + step / 2 for step, _, value in rows)
        # Every acknowledged point is there with its own timestamp (more may be: a spool
        # write that landed just before the kill, its flush never acknowledged).
        assert {(s, ts, v) for k, s, ts, v in acked if k == key} <= set(rows)
    assert len(acked) >= 3_000
    # Nobody ended the run: the job died before run.end(), so the spool holds no status and
    # sync sets none. MLflow keeps it RUNNING, which is what happened.
    assert run.info.status == "RUNNING"
    assert run.info.end_time is None
    assert "RUNNING" in synced.stdout
    print(
        f"\nacknowledged {len(acked)}, in MLflow {sum(map(len, stored.values()))}; "
        f"server startup {server.startups_s}"
    )


@pytest.fixture
def read_only_folder(tmp_path: Path):
    """A read-only tmpfs (root only, as in CI); skipped where mounting is not allowed."""
    target = tmp_path / "ro"
    target.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield target
    subprocess.run(["umount", "-l", str(target)], check=False)


def test_run_with_a_read_only_home_fails_fast_before_ray(run_engage, read_only_folder) -> None:
    started = time.monotonic()
    result = run_engage("run", "pipelines/quickstart.yaml", "--home", str(read_only_folder))
    took = time.monotonic() - started

    assert result.returncode == 5, result.stdout + result.stderr
    assert "cannot write the tracking spool" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "starting Ray" not in result.stdout
    assert took < 15, f"took {took:.1f} s: the spool must be checked before Ray starts"
    print(f"\nread-only home: exit 5 after {took:.1f} s")
