"""The drainer in its own process (issue 11 item 7): same methods, another process, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient

from engage.tracking import Drainer, Spool, drain


def test_start_drains_from_a_separate_low_priority_process(
    store_home: Path, tmp_path: Path
) -> None:
    uri = f"sqlite:///{store_home / 'mlflow.db'}"
    spool = Spool(tmp_path / "spool.db")
    run = spool.create_run(uri, "drain-process", "r", {})
    spool.append_points(run, [("metric", "m", float(i), i, 1_000 + i) for i in range(500)])
    spool.end_run(run, "FINISHED")

    drainer = Drainer(spool.path).start()
    child = psutil.Process(drainer.pid)
    deadline = time.monotonic() + 60
    while child.nice() != 19 and time.monotonic() < deadline:  # once it has sent something
        time.sleep(0.05)
    nice = child.nice()
    deadline = time.monotonic() + 120
    while not drainer.is_drained(run) and time.monotonic() < deadline:
        time.sleep(0.1)  # no flush(): that would drain here, in the foreground
    drained = drainer.is_drained(run)
    drainer.stop()

    assert drained
    assert drainer.pid is None
    assert child.pid != os.getpid()
    assert nice == 19
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    server_id = spool.run(run).server_id
    assert len(MlflowClient(uri).get_metric_history(server_id, "m")) == 500


def _live_drainers_of(spool_path: Path) -> list[int]:
    """Our descendants that drain ``spool_path`` and still run (not other tests' drainers)."""
    pids = []
    for p in psutil.Process().children(recursive=True):
        try:
            command = p.cmdline()
            if (
                "engage.tracking.drainer_main" in command
                and str(spool_path) in command
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                pids.append(p.pid)
        except psutil.Error:  # it ended while we looked
            continue
    return pids


def test_flush_drains_in_the_foreground_then_hands_back_to_a_new_process_later(
    store_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain, "HANDBACK_AFTER_S", 0.5)
    uri = f"sqlite:///{store_home / 'mlflow.db'}"
    spool = Spool(tmp_path / "spool.db")
    run = spool.create_run(uri, "drain-flush", "r", {})
    spool.append_points(run, [("metric", "m", float(i), i, 1_000 + i) for i in range(300)])
    drainer = Drainer(spool.path).start()
    first = drainer.pid

    drained = drainer.flush(run, timeout_s=120)
    right_after = drainer.pid  # a job's end flushes again within seconds: no process yet
    deadline = time.monotonic() + 30
    while drainer.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    second = drainer.pid
    drainer.stop()

    assert drained
    assert right_after is None
    assert second is not None
    assert second != first


def test_flushes_in_a_row_and_a_stop_start_no_process_in_between(
    store_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain, "HANDBACK_AFTER_S", 0.5)
    uri = f"sqlite:///{store_home / 'mlflow.db'}"
    spool = Spool(tmp_path / "spool.db")
    run = spool.create_run(uri, "drain-end", "r", {})
    spool.append_points(run, [("metric", "m", 1.0, 0, 1_000)])
    drainer = Drainer(spool.path).start()
    first = drainer.pid

    assert drainer.flush(run, timeout_s=120)
    spool.append_points(run, [("metric", "m", 2.0, 1, 1_001)])
    assert drainer.flush(run, timeout_s=120)  # within the handback delay: drains here
    drainer.stop()
    time.sleep(1.0)  # past the delay: a handback that stop() did not cancel would start now

    assert drainer.pid is None
    assert _live_drainers_of(spool.path) == []
    assert first is not None
    server_id = spool.run(run).server_id
    assert [m.value for m in MlflowClient(uri).get_metric_history(server_id, "m")] == [1.0, 2.0]


def test_the_drainer_process_passes_on_warnings_and_permanent_faults(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    run = spool.create_run("http://127.0.0.1:9", "down", "r", {})
    spool.append_points(run, [("metric", "m", 1.0, 0, 1)])
    warnings: list[str] = []

    drainer = Drainer(spool.path, warn=warnings.append).start()
    deadline = time.monotonic() + 90  # the child imports MLflow first: seconds on a busy box
    while drainer.status.error is None and time.monotonic() < deadline:
        time.sleep(0.1)
    drained = drainer.flush(run, timeout_s=1)
    error = drainer.status.error
    drainer.stop()

    assert not drained
    assert error is not None
    assert any("unreachable" in w and "1 waiting" in w for w in warnings), warnings


_PARENT = """
import sys, time
from engage.tracking import Drainer
drainer = Drainer(sys.argv[1]).start()
print(drainer.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_job_leaves_no_drainer_process_behind(tmp_path: Path) -> None:
    Spool(tmp_path / "spool.db").close()
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_PARENT), str(tmp_path / "spool.db")],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = psutil.Process(int(parent.stdout.readline()))

    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the drainer process outlived its job"
        time.sleep(0.1)
