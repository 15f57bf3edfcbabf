"""The serving app on a local Ray cluster engage manages, with real HTTP requests.

One module-scoped deployment (started with ``engage deploy`` as a user would, on an
engage-managed head stopped by pid at the end) is shared by every test here: bad requests,
auth, metadata, metrics, drift samples, a bounded load test, then the rollout and canary.
Two tiny registered versions stand in for trained models (same signature as engage's).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests
from _tiny_model import FEATURE_NAMES, FEATURES, MODEL, WINDOW

pytestmark = pytest.mark.integration

ENGAGE = Path(sys.executable).with_name("engage")
TOKEN = "integration-token-0123456789abcdef"
FAST_S = 0.2  # every bad request must be answered within this


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    home: Path
    url: str
    spec: Path
    env: dict[str, str]

    def engage(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300):
        return subprocess.run(
            [str(ENGAGE), *args],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_home) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("serve")
    home = tiny_home(root)
    port = _free_port()
    spec = root / "serve.yaml"
    spec.write_text(
        f"""
name: serve-test
data: {{source: {{type: synthetic}}, features: [co2], target: occupied, task: classification}}
model: {{name: mlp}}
deploy:
  port: {port}
  max_batch_size: 8
  sampling: {{rate: 1.0}}
  metrics_every_seconds: 2
"""
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env |= {"ENGAGE_HOME": str(home), "COLUMNS": "200"}
    env.pop("ENGAGE_SERVE_TOKEN", None)
    s = Served(home, f"http://127.0.0.1:{port}", spec, env)
    try:
        done = s.engage("deploy", f"{MODEL}@candidate", "--spec", str(spec))
        assert done.returncode == 0, done.stdout + done.stderr
        yield s
    finally:
        s.engage("serve", "stop", timeout=120)
        from engage.serve.cluster import stop_managed

        assert stop_managed(home) == []  # nothing of the managed head survives


def _window(n: int = 1, seed: int = 0) -> list:
    return np.random.default_rng(seed).normal(size=(n, WINDOW, FEATURES)).round(4).tolist()


def _post(url: str, body, session=None, **kw) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    return (session or requests).post(
        f"{url}/predict", data=data, headers=headers, timeout=10, **kw
    )


BAD = [
    ("malformed JSON", "POST", "/predict", b'{"inputs": [', 400, "malformed_json"),
    ("wrong shape", "POST", "/predict", {"inputs": [[[1.0, 2.0]]]}, 422, "wrong_shape"),
    (
        "wrong dtype",
        "POST",
        "/predict",
        {"inputs": [[["a", 1.0, 2.0]] * WINDOW]},
        422,
        "wrong_dtype",
    ),
    (
        "NaN",
        "POST",
        "/predict",
        b'{"inputs": [[[NaN, 1, 2], [1, 2, 3], [1, 2, 3], [1, 2, 3]]]}',
        422,
        "non_finite",
    ),
    ("10 MB body", "POST", "/predict", b"x" * (10 * 1024 * 1024), 413, "body_too_large"),
    ("unknown route", "GET", "/nowhere", None, 404, "not_found"),
    ("wrong method", "GET", "/predict", None, 405, "method_not_allowed"),
]


@pytest.mark.parametrize(
    ("what", "method", "path", "body", "status", "code"), BAD, ids=[b[0] for b in BAD]
)
def test_bad_requests_get_the_right_4xx_fast(served, what, method, path, body, status, code):
    data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}

    started = time.perf_counter()
    answer = requests.request(method, served.url + path, data=data, headers=headers, timeout=10)
    elapsed = time.perf_counter() - started

    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert "Traceback" not in answer.text
    assert elapsed < FAST_S, f"{what}: {elapsed * 1000:.0f} ms"
    good = _post(served.url, {"inputs": _window()})  # still serving correct requests
    assert good.status_code == 200


def test_correct_request_answers_classes_version_and_ids(served):
    answer = _post(served.url, {"inputs": _window(3), "request_ids": ["a", "b", "c"]})

    body = answer.json()
    assert answer.status_code == 200
    assert body["model"] == {"name": MODEL, "version": "1"}
    assert body["request_ids"] == ["a", "b", "c"]
    assert set(body["predictions"]) <= {"away", "home"}
    assert len(body["probabilities"]) == 3


def test_invocations_take_mlflow_dataframe_split_and_the_deploys_example(served):
    windows = _window(2, seed=3)
    rows = [row[::-1] for window in windows for row in window]  # columns in another order
    split = {"dataframe_split": {"columns": list(FEATURE_NAMES[::-1]), "data": rows}}
    example = served.home / "serve" / MODEL / "example.json"  # written by `engage deploy`

    mlflow_style = requests.post(f"{served.url}/invocations", json=split, timeout=10)
    predict = _post(served.url, {"inputs": windows})
    missing = requests.post(
        f"{served.url}/invocations",
        json={"dataframe_split": {"columns": ["co2"], "data": [[1.0]] * WINDOW}},
        timeout=10,
    )
    from_example = _post(served.url, json.loads(example.read_bytes()))

    assert mlflow_style.status_code == 200, mlflow_style.text
    assert mlflow_style.json()["predictions"] == predict.json()["predictions"]
    assert mlflow_style.json()["probabilities"] == predict.json()["probabilities"]
    assert (missing.status_code, missing.json()["error"]["code"]) == (422, "missing_column")
    assert missing.json()["error"]["field"] == "dataframe_split.columns"
    assert from_example.status_code == 200, from_example.text


def test_metadata_names_model_version_and_signature(served):
    meta = requests.get(f"{served.url}/metadata", timeout=10).json()

    assert (meta["name"], meta["version"], meta["classes"]) == (MODEL, "1", ["away", "home"])
    assert meta["features"] == list(FEATURE_NAMES)  # the columns /invocations matches by name
    tensor = meta["signature"]["inputs"][0]["tensor-spec"]
    assert tensor == {"dtype": "float32", "shape": [-1, WINDOW, FEATURES]}
    assert requests.get(f"{served.url}/health", timeout=10).json()["status"] == "ok"


def test_non_loopback_without_token_is_refused(served):
    done = served.engage("deploy", f"{MODEL}@candidate", "--host", "0.0.0.0", "--app", "open")

    assert done.returncode == 1
    assert "refusing to serve on 0.0.0.0 without a bearer token" in done.stderr


def test_bearer_token_401_403_200(served):
    token_env = {"ENGAGE_SERVE_TOKEN": TOKEN}
    done = served.engage(
        "deploy", f"{MODEL}@candidate", "--spec", str(served.spec),
        "--set", "deploy.route_prefix=/secure", "--app", "secure", env=token_env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    url = f"{served.url}/secure"
    try:
        missing = _post(url, {"inputs": _window()})
        wrong = _post(url, {"inputs": _window()}, headers={"Authorization": "Bearer nope-nope"})
        right = _post(url, {"inputs": _window()}, headers={"Authorization": f"Bearer {TOKEN}"})
        meta = requests.get(f"{url}/metadata", timeout=10)
    finally:
        served.engage("serve", "stop", "secure")

    assert (missing.status_code, missing.json()["error"]["code"]) == (401, "unauthorized")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (403, "forbidden")
    assert right.status_code == 200
    assert meta.status_code == 401


def test_bounded_load_on_loopback_has_zero_errors(served):
    n_threads, per_thread = 4, 125
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(seed: int) -> None:
        session = requests.Session()
        for i in range(per_thread):
            body = {"inputs": _window(1, seed * 1000 + i)}
            started = time.perf_counter()
            try:
                answer = _post(served.url, body, session)
                ok = answer.status_code == 200
            except requests.RequestException as exc:
                ok, answer = False, exc
            with lock:
                latencies.append(time.perf_counter() - started)
                if not ok:
                    errors.append(str(getattr(answer, "text", answer))[:200])

    threads = [threading.Thread(target=client, args=(t,)) for t in range(n_threads)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    wall = time.perf_counter() - started

    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    print(
        f"\nload: {len(latencies)} requests, 4 threads, {wall:.1f} s, {len(latencies) / wall:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )
    assert len(latencies) == n_threads * per_thread
    assert errors == []


def test_replica_metrics_count_requests_by_status(served):
    from engage.monitor.discovery import list_targets

    targets = [t for t in list_targets(served.home) if t.get("app") == MODEL]
    assert targets, "the ingress replica advertised no metrics endpoint"
    text = requests.get(f"http://{targets[0]['address']}/metrics", timeout=10).text

    assert "engage_requests_total{" in text
    for status in ("200", "400", "404", "413", "422"):
        assert f'status="{status}"' in text, status
    assert "engage_request_seconds_bucket" in text
    assert (
        'engage_predictions_total{class="' in text
        or 'class="home"' in text
        or 'class="away"' in text
    )


def test_drift_samples_reach_the_consumer(served):
    from engage.serve.sampling import read_samples

    ids = [f"drift-{i}" for i in range(3)]
    assert _post(served.url, {"inputs": _window(3), "request_ids": ids}).status_code == 200
    path = served.home / "serve" / MODEL / "samples.sqlite"
    deadline = time.monotonic() + 10
    found: set[str] = set()
    while time.monotonic() < deadline and not set(ids) <= found:
        time.sleep(0.2)
        found = {r["request_id"] for r in read_samples(path, 5000)} if path.exists() else set()

    assert set(ids) <= found
    row = next(r for r in read_samples(path, 5000) if r["request_id"] == ids[0])
    assert np.array(json.loads(row["inputs"])).shape == (WINDOW, FEATURES)
    assert row["label"] in ("away", "home")


def test_status_lists_the_app(served):
    done = served.engage("serve", "status")

    assert done.returncode == 0, done.stderr
    assert MODEL in done.stdout
    assert "v1 (100%)" in done.stdout
    assert " ok " in done.stdout


def test_rollout_under_continuous_requests_has_zero_failures(served):
    seen: list[tuple[int, str]] = []
    stop = threading.Event()

    def client() -> None:
        session = requests.Session()
        deadline = time.monotonic() + 240  # bounded even if the deploy hangs
        i = 0
        while not stop.is_set() and time.monotonic() < deadline:
            i += 1
            try:
                answer = _post(served.url, {"inputs": _window(1, i)}, session)
                version = answer.json().get("model", {}).get("version", "?")
                seen.append((answer.status_code, version))
            except requests.RequestException as exc:
                seen.append((0, type(exc).__name__))
            time.sleep(0.01)

    thread = threading.Thread(target=client)
    thread.start()
    try:
        done = served.engage("deploy", f"{MODEL}@champion", "--spec", str(served.spec))
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join(timeout=30)

    assert done.returncode == 0, done.stdout + done.stderr
    failures = [s for s in seen if s[0] != 200]
    versions = [v for _, v in seen]
    print(f"\nrollout: {len(seen)} requests during the swap, {len(failures)} failed")
    assert failures == []
    assert versions[0] == "1"
    assert versions[-10:] == ["2"] * 10
    first_new = versions.index("2")
    assert set(versions[first_new:]) == {"2"}  # one ingress: no flapping back
    assert "no longer served: version(s) 1" in done.stdout


def test_canary_splits_by_request_id(served):
    done = served.engage(
        "deploy", f"{MODEL}@champion", "--spec", str(served.spec),
        "--canary", "1", "--canary-weight", "0.5",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    session = requests.Session()

    def version(rid: str) -> str:
        answer = _post(served.url, {"inputs": _window(), "request_ids": [rid]}, session)
        assert answer.status_code == 200
        return answer.json()["model"]["version"]

    first = {f"user-{i}": version(f"user-{i}") for i in range(40)}
    again = {rid: version(rid) for rid in first}

    assert set(first.values()) == {"1", "2"}
    assert again == first
