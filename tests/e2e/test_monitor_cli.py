"""`engage monitor` as a user runs it: the live view, the lists, the standalone service."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engage.events import Event
from engage.monitor import MonitorSink
from engage.monitor.store import EventStore
from engage.monitor.store_sink import StoreSink

pytestmark = pytest.mark.e2e

ENGAGE = Path(sys.executable).with_name("engage")


@pytest.fixture
def home(engage_env: dict[str, str]) -> Path:
    return Path(engage_env["ENGAGE_HOME"])


@pytest.fixture
def job(home: Path) -> Iterator[MonitorSink]:
    """A job's endpoint and store rows, as a running pipeline leaves them (no Ray)."""
    sink = MonitorSink("quickstart", "run0abc", home)
    endpoint = sink.start()
    store = StoreSink(EventStore.open(home), "quickstart", "run0abc")
    store.start(endpoint.url)
    events = [
        Event("lifecycle", "stage", data={"stage": "train"}),
        Event("lifecycle", "train_start", labels={"rank": "0"}, data={"world_size": 2}),
        Event("metric", "epoch", 4.0),
        Event("metric", "train_loss", 0.3141),
        Event("metric", "val_accuracy", 0.9),
        Event("metric", "step_seconds", 0.02, labels={"rank": "0"}),
        Event("lifecycle", "alert", data={"rule": "LossDiverging", "state": "firing",
              "severity": "warning", "summary": "train loss doubled", "value": 2.1}),
    ]  # fmt: skip
    sink.emit(events)
    store.emit(events)
    yield sink
    sink.stop()


def test_monitor_once_shows_the_running_job_and_its_open_alert(run_engage, job) -> None:
    done = run_engage("monitor", "--once", timeout=60)

    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "run0abc" in line and "train" in line)
    for cell in ("quickstart", "running", "train", " 4 ", "0.3141", "accuracy 0.9", "2"):
        assert cell in row, row
    assert "open alerts" in done.stdout
    assert "LossDiverging" in done.stdout
    assert "train loss doubled" in done.stdout


def test_monitor_once_with_nothing_running_says_so(run_engage) -> None:
    done = run_engage("monitor", "--once", timeout=60)

    assert done.returncode == 0, done.stderr
    assert "no running jobs" in done.stdout
    assert "no open alerts" in done.stdout


def test_events_and_alerts_list_the_store(run_engage, job) -> None:
    events = run_engage("monitor", "events", "--run", "run0abc", timeout=60)
    alerts = run_engage("monitor", "alerts", timeout=60)

    assert events.returncode == 0, events.stderr
    assert "stage train" in events.stdout
    assert "training started with 2 workers" in events.stdout
    assert alerts.returncode == 0, alerts.stderr
    assert "LossDiverging" in alerts.stdout
    assert "warning" in alerts.stdout


def test_serve_refuses_a_non_loopback_host(run_engage) -> None:
    done = run_engage("monitor", "serve", "--host", "0.0.0.0", timeout=60)

    assert done.returncode == 1
    assert "not a loopback address" in done.stderr
    assert "--allow-remote" in done.stderr


def test_serve_scrapes_jobs_serves_metrics_and_stops_on_sigterm(
    engage_env: dict[str, str], tmp_path: Path, job
) -> None:
    proc = subprocess.Popen(
        [str(ENGAGE), "monitor", "serve", "--port", "0", "--interval", "0.5"],
        cwd=tmp_path,
        env=engage_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        url = re.search(r"on (http://127\.0\.0\.1:\d+/metrics)", proc.stdout.readline()).group(1)
        text = _wait_for(url, 'engage_up{job="quickstart",run_id="run0abc"} 1.0')
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert 'engage_monitor_jobs{state="up"} 1.0' in text
    assert proc.returncode == 0, err
    assert "monitor service stopped" in out


def _wait_for(url: str, needle: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                text = response.read().decode()
        except OSError:
            text = ""
        if needle in text:
            return text
        time.sleep(0.2)
    raise AssertionError(f"{needle!r} not served at {url} within {timeout_s} s:\n{text}")
