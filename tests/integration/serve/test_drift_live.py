"""End to end: the quickstart model served, in-distribution then shifted traffic over HTTP.

The model is trained, registered and served by one ``engage run`` (1 epoch, 7 days of data,
``deploy.after_training``, every request sampled); the replica's drift watcher must stay
quiet on in-distribution windows and, on shifted ones, raise the alert event (event
store), the Prometheus gauge (the replica's /metrics) and the MLflow record (the
deployment's monitoring run). The app and the managed Ray head are stopped by engage (by
process id) at the end, always.

In-distribution here means windows of the training period of the same households that the
model never saw as windows (other offsets than the training stride): another generator
seed is another population, and windows from the held-out weekend differ too; the CUSUM
detector flags both within ~50 sampled windows (humidity, temperature), which is a correct
detection, not a false alarm.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests

pytestmark = pytest.mark.integration

ENGAGE = Path(sys.executable).with_name("engage")
REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "pipelines" / "quickstart.yaml"
MODEL = "smart-home-occupancy"
FEATURES = ["temperature", "humidity", "co2", "motion", "power"]
WINDOW = 30
CHECK_EVERY = 50
WAIT_S = 90.0


@dataclass
class Served:
    home: Path
    url: str
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _engage(env: dict[str, str], cwd: Path, *args: str, timeout: float = 600):
    return subprocess.run(
        [str(ENGAGE), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("drift-live")
    home = root / ".engage"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env |= {"ENGAGE_HOME": str(home), "COLUMNS": "200"}
    env.pop("ENGAGE_SERVE_TOKEN", None)
    port = _free_port()
    sets = [
        "train.epochs=1",
        "train.num_workers=1",  # the model to serve, not data-parallel training, is under test
        "data.source.days=7",
        "export.formats=[]",
        # trained and served by one `engage run`, on one Ray cluster (the managed head)
        "deploy.after_training=true",
        f"deploy.port={port}",
        "deploy.sampling.rate=1.0",
        "deploy.metrics_every_seconds=2",
        f"deploy.drift.check_every={CHECK_EVERY}",
        f"deploy.drift.min_samples={CHECK_EVERY}",
        "deploy.drift.ert=100000",
        # This file checks the watcher's gauges, alert and MLflow record for named detectors;
        # the default set (bocpd, health) is exercised end to end by the quickstart's demo.
        "deploy.drift.detectors=[cusum,quality]",
    ]
    try:
        done = _engage(
            env, root, "run", str(QUICKSTART), "--home", str(home),
            *[a for s in sets for a in ("--set", s)],
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        yield Served(home, f"http://127.0.0.1:{port}", env)
    finally:
        _engage(env, root, "serve", "stop", "--home", str(home), timeout=180)
        from engage.serve.cluster import stop_managed

        stop_managed(home)
        _kill_leftovers(root)


def _kill_leftovers(root: Path) -> None:
    """Ray's agents rename themselves (``ray::DashboardAgent``), so a stop that matches the
    temp dir in command lines can miss them; they run in this test's folder (their cwd)."""
    import psutil

    mine = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and Path(p.cwd()).is_relative_to(root):
                mine.append(p)
        except (psutil.Error, OSError):
            continue
    for p in mine:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(mine, timeout=5)


def _in_distribution(n: int, seed: int) -> np.ndarray:
    """Unseen windows of the training period (same households, offsets 2 mod the stride 5)."""
    from numpy.lib.stride_tricks import sliding_window_view

    from engage.data.synthetic import generate_smart_living

    frame = generate_smart_living(4, 7, 7, "2026-01-05", 1.0)
    parts = []
    for _, rows in frame.groupby("household"):
        x = rows[FEATURES].to_numpy(np.float32)[: int(4.5 * 1440)]  # inside the train split
        parts.append(sliding_window_view(x, WINDOW, axis=0).transpose(0, 2, 1)[2::5])
    windows = np.concatenate(parts)
    return windows[np.random.default_rng(seed).choice(len(windows), n, replace=False)]


def _post_all(url: str, windows: np.ndarray) -> None:
    with requests.Session() as session:
        for i in range(0, len(windows), 50):
            body = json.dumps({"inputs": windows[i : i + 50].round(3).tolist()})
            answer = session.post(
                f"{url}/predict", data=body, headers={"Content-Type": "application/json"}
            )
            assert answer.status_code == 200, answer.text


def _replica_metrics(home: Path) -> dict[tuple[str, tuple], float]:
    """Every sample of the app's replica endpoints: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    from engage.monitor.discovery import list_targets

    out = {}
    for target in list_targets(home):
        if not target["job"].startswith("serve-"):
            continue
        text = requests.get(f"http://{target['address']}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _values(metrics: dict, name: str, **match: str) -> list[float]:
    return [
        v
        for (n, labels), v in metrics.items()
        if n == name and all(dict(labels).get(k) == m for k, m in match.items())
    ]


def _until(what, seconds: float = WAIT_S, every: float = 0.2):
    deadline = time.monotonic() + seconds
    while True:
        value = what()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def test_in_distribution_traffic_raises_no_alert(served):
    from engage.monitor.store import EventStore

    _post_all(served.url, _in_distribution(300, seed=1))

    def checked() -> bool:
        counts = _values(
            _replica_metrics(served.home), "engage_drift_checks_total", detector="cusum"
        )
        return sum(counts) >= 300 // CHECK_EVERY

    assert _until(checked), "the drift watcher did not check the sampled windows in time"
    metrics = _replica_metrics(served.home)
    assert _values(metrics, "engage_drift_detected", detector="cusum") == [0.0]
    assert _values(metrics, "engage_drift_detected", detector="quality") == [0.0]
    assert EventStore.open(served.home).open_alerts() == []


def test_shifted_traffic_raises_the_alert_the_gauge_and_the_mlflow_record(served):
    from engage.monitor.store import EventStore
    from engage.serve.demo import drift_demo
    from engage.tracking.store import open_client

    started = time.monotonic()
    alert = drift_demo(served.url, served.home, n=100, timeout_s=WAIT_S)
    seconds = time.monotonic() - started

    # the alert event, in the event store
    assert alert.rule == "EngageDriftDetected"
    assert (alert.model, alert.version) == (MODEL, "1")
    assert set(alert.features) & {"temperature", "co2"}
    assert set(alert.features) <= {"temperature", "co2"}
    opened = [a for a in EventStore.open(served.home).open_alerts() if a.rule == alert.rule]
    assert len(opened) == 1
    assert opened[0].job == f"serve-{MODEL}"
    assert "temperature" in opened[0].summary or "co2" in opened[0].summary
    # the Prometheus gauge, on the replica's endpoint
    metrics = _replica_metrics(served.home)
    assert 1.0 in _values(metrics, "engage_drift_detected", detector="cusum")
    statistic = _values(metrics, "engage_drift_statistic", detector="cusum", feature="temperature")
    assert max(statistic) >= 1.0
    # the MLflow record: the deployment's monitoring run
    client = open_client(f"sqlite:///{served.home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("engage-serving")

    def recorded():
        runs = client.search_runs([experiment.experiment_id])
        for run in runs:
            tag = run.data.tags.get("engage.alert.EngageDriftDetected", "")
            if tag.startswith("firing") and run.data.metrics.get("drift_detected_cusum") == 1.0:
                return run
        return None

    run = _until(recorded)
    assert run is not None, "no drift metrics and alert tag on the monitoring run"
    assert any(k.startswith("drift_statistic_cusum_") for k in run.data.metrics)
    print(f"drift alert after {seconds:.1f} s and {alert.windows_sent} shifted windows")
