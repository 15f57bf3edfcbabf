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


def _fault_helpers():
    """tests/unit/tracking/test_faults.py: a half-created MLflow store, a corrupted page."""
    path = Path(__file__).parents[1] / "unit" / "tracking" / "test_faults.py"
    spec = importlib.util.spec_from_file_location("_tracking_fault_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


support = _fault_helpers()


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


def _spool_points(home: Path, uri: str, points: int) -> None:
    from engage.tracking import Spool

    spool = Spool(home / "spool.db")
    run = spool.create_run(uri, "repair", "r", {})
    spool.append_points(run, [("metric", "m", float(i), i, 1_000 + i) for i in range(points)])
    spool.end_run(run, "FINISHED")
    spool.close()


def test_sync_on_a_half_created_store_exits_5_naming_the_repair_which_then_works(
    run_engage, tmp_path: Path
) -> None:
    # Issue 11 item 4: a job killed while MLflow created its SQLite store left it
    # half-created, and `engage sync` exited 5 forever telling the user to check the server.
    home = tmp_path / "home"
    full = tmp_path / "full" / "mlflow.db"
    support.make_store(full)
    store = support.half_created_store(full, home / "mlflow.db")
    _spool_points(home, f"sqlite:///{store}", 50)

    broken = run_engage("sync", "--home", str(home), "--timeout", "20", timeout=180)
    repaired = run_engage("sync", "--repair", "--home", str(home), timeout=300)

    assert broken.returncode == 5, broken.stdout + broken.stderr
    assert str(store) in broken.stderr
    assert "engage sync --repair" in broken.stderr
    assert "Traceback" not in broken.stdout + broken.stderr
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "moved aside" in repaired.stdout
    client = MlflowClient(f"sqlite:///{store}")
    (run,) = client.search_runs([client.get_experiment_by_name("repair").experiment_id])
    assert len(client.get_metric_history(run.info.run_id, "m")) == 50
    assert run.info.status == "FINISHED"


def test_sync_on_a_corrupted_spool_exits_5_and_repair_salvages_it(
    run_engage, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _spool_points(home, f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}", 3_000)
    support.corrupt_a_page(home / "spool.db")

    broken = run_engage("sync", "--home", str(home), "--timeout", "20", timeout=180)
    repaired = run_engage("sync", "--repair", "--home", str(home), timeout=300)

    assert broken.returncode == 5, broken.stdout + broken.stderr
    assert "damaged" in broken.stderr
    assert "engage sync --repair" in broken.stderr
    assert "Traceback" not in broken.stdout + broken.stderr
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "salvaged" in repaired.stdout
