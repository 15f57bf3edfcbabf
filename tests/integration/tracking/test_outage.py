"""A tracking outage never stops, slows or loses a job: contract over SQLite and PostgreSQL stores.

A real job process (``_job.py``) reports 10,000 metric points through engage's Reporter and
spool while a real `mlflow server` is SIGKILLed under it and restarted on the same store.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from _harness import Job, metric_rows
from mlflow import MlflowClient

pytestmark = pytest.mark.integration

METRICS, STEPS = 10, 1000
KEYS = [f"m{k}" for k in range(METRICS)]
DOWN_S = 3.0  # how long the server stays dead before it is started again
LATENCY_LIMIT_S = 1.0  # a tenth of the drainer's 10 s HTTP timeout
CATCH_UP_LIMIT_S = 15.0  # server healthy -> spool empty; half the drainer's 30 s max backoff


def _experiment(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def _assert_every_point_once(client: MlflowClient, run_id: str, job: Job) -> None:
    reported = job.acknowledged_points()
    assert len(reported) == METRICS * STEPS
    stored = metric_rows(client, run_id, KEYS)
    for key in KEYS:
        expected = sorted((step, ts, value) for k, step, ts, value in reported if k == key)
        duplicated = [s for s, n in Counter(s for s, _, _ in stored[key]).items() if n > 1]
        assert not duplicated, f"{key}: steps stored more than once: {duplicated[:10]}"
        assert stored[key] == expected, f"{key}: stored points differ from what the job reported"


def _warnings(job: Job, text: str) -> list[str]:
    return [line for line in job.stderr.splitlines() if text in line]


def _assert_one_outage_reported(job: Job) -> None:
    assert len(_warnings(job, "MLflow unreachable")) == 1, job.stderr
    assert len(_warnings(job, "MLflow reachable again")) == 1, job.stderr


def test_server_killed_mid_job_loses_and_duplicates_nothing(
    backend_uri: str, mlflow_server, start_job
) -> None:
    server = mlflow_server(backend_uri)
    server.start()
    job = start_job(server.url, _experiment("outage"))

    job.wait_acked(3_000)
    down_at = time.time()
    server.kill()
    time.sleep(DOWN_S)
    server.start()
    up_at = time.time()
    summary = job.finish()

    assert summary["drained"]
    assert summary["left_in_spool"] == 0
    _assert_one_outage_reported(job)
    assert summary["drained_at"] - up_at < CATCH_UP_LIMIT_S, summary
    client = MlflowClient(server.url)
    _assert_every_point_once(client, summary["run_id"], job)
    assert client.get_run(summary["run_id"]).info.status == "FINISHED"
    # The outage really hit reporting, and reporting did not feel it.
    during = [slowest for t, slowest in job.latency() if down_at <= t <= up_at]
    assert len(during) >= 100, f"only {len(during)} steps reported while the server was down"
    assert max(during) < LATENCY_LIMIT_S, f"a report call took {max(during):.3f} s in the outage"
    print(
        f"\n[{backend_uri.split(':')[0]}] server startups {server.startups_s}; "
        f"steps during outage {len(during)}, slowest call then {max(during) * 1e3:.1f} ms; "
        f"spool empty {summary['drained_at'] - up_at:.1f} s after restart; job: {summary}"
    )


def test_run_started_while_server_is_down_is_created_when_it_returns(
    backend_uri: str, mlflow_server, start_job
) -> None:
    server = mlflow_server(backend_uri)  # not started: unreachable from the job's first call
    job = start_job(server.url, _experiment("late"), "--seconds", "4")

    job.wait_acked(2_000)
    server.start()
    up_at = time.time()
    summary = job.finish()

    assert summary["drained"]
    _assert_one_outage_reported(job)
    assert summary["drained_at"] - up_at < CATCH_UP_LIMIT_S, summary
    client = MlflowClient(server.url)
    run = client.get_run(summary["run_id"])
    assert run.data.tags["engage.local_run_id"] == summary["local_id"]
    assert run.info.status == "FINISHED"
    _assert_every_point_once(client, summary["run_id"], job)
    print(
        f"\n[{backend_uri.split(':')[0]}] startup {server.startups_s}; spool empty "
        f"{summary['drained_at'] - up_at:.1f} s after it; job: {summary}"
    )
