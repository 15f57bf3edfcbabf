"""The post-training deploy's smoke request carries the bearer token (issue 11 item 6).

With ``ENGAGE_SERVE_TOKEN`` exported every app needs the token, so the one prediction the
deploy stage sends must present it; before the fix it got 401 and the run failed. A real
HTTP server on loopback stands in for the served app (no Ray).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pytest

from engage.runtime import deploy as deploy_stage
from engage.runtime.options import RunOptions
from engage.serve import DeployResult
from engage.spec.models import DeploySpec

TOKEN = "smoke-token-0123456789abcdef"


@pytest.fixture
def app_url():
    """A /predict that answers 200 only to ``Bearer TOKEN``, like an app deployed with it."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            body = json.dumps({"predictions": [1]} if ok else {"error": {"code": "unauthorized"}})
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/app"
    finally:
        server.shutdown()


def test_the_smoke_request_presents_the_exported_token(app_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ENGAGE_SERVE_TOKEN", TOKEN)
    result = DeployResult(
        "app", app_url, "m", "1", None, 0.0, (), "127.0.0.1:1", False, None, 0.1,
        "127.0.0.1:1", "ENGAGE_SERVE_TOKEN",
    )  # fmt: skip
    monkeypatch.setattr(deploy_stage, "_deploy_in_subprocess", lambda options: result)
    monkeypatch.setattr(deploy_stage, "raw_inputs", lambda data, n: np.zeros((1, 2, 2)))
    spec = SimpleNamespace(tracking=SimpleNamespace(tracking_uri=None), deploy=DeploySpec())
    options = RunOptions(None, f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)

    deployment = deploy_stage.deploy(
        SimpleNamespace(spec=spec), None, SimpleNamespace(name="m", version="1"), options
    )

    assert deployment.response == {"predictions": [1]}
