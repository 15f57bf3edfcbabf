"""A real Prometheus on loopback for tests: the shipped deploy/prometheus config, 1 s intervals.

Plain helpers, no pytest here. The config's discovery path is relative
(``.engage/prometheus/targets/*.json``), so a Prometheus run in folder F finds every job whose
ENGAGE_HOME is ``F/.engage``, which is what the ``engage_env`` fixture sets for tmp_path.
See /work/shared/NOTES.md, "A real Prometheus on loopback".
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from time import monotonic  # bound at import: unit tests may patch time.monotonic
from typing import Any, TypeVar

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(probe: Callable[[], T], timeout_s: float, what: str, every_s: float = 0.5) -> T:
    """Call ``probe`` until it returns something truthy; AssertionError naming ``what``."""
    deadline = monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(every_s)


class Prometheus:
    """``prometheus`` started in ``folder`` on a free loopback port; stop() ends it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.url = f"http://127.0.0.1:{free_port()}"
        self._proc: subprocess.Popen | None = None

    def start(self, ready_timeout_s: float = 30.0) -> Prometheus:
        config = (DEPLOY / "prometheus.yml").read_text()
        for slow, fast in [
            ("scrape_interval: 15s", "scrape_interval: 1s"),
            ("evaluation_interval: 15s", "evaluation_interval: 1s"),
            ("refresh_interval: 5s", "refresh_interval: 1s"),
        ]:
            assert slow in config, f"deploy/prometheus/prometheus.yml no longer has {slow!r}"
            config = config.replace(slow, fast)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "prometheus.yml").write_text(config)
        shutil.copy(DEPLOY / "rules.yml", self.folder / "rules.yml")
        self._proc = subprocess.Popen(
            ["prometheus", "--config.file=prometheus.yml", "--storage.tsdb.path=data",
             f"--web.listen-address={self.url.removeprefix('http://')}"],
            cwd=self.folder, stdout=subprocess.DEVNULL,
            stderr=(self.folder / "prometheus.log").open("w"),
        )  # fmt: skip
        wait_for(self._ready, ready_timeout_s, f"Prometheus ready at {self.url}")
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _ready(self) -> bool:
        assert self._proc is not None
        assert self._proc.poll() is None, f"prometheus exited:\n{self.log()}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def log(self) -> str:
        path = self.folder / "prometheus.log"
        return path.read_text()[-3000:] if path.exists() else ""

    # -- the HTTP API ----------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as r:
                body = json.load(r)
        except OSError:
            return None
        return body["data"] if body.get("status") == "success" else None

    def query(self, promql: str) -> list[dict]:
        """The instant vector of ``promql``: ``[{"metric": {labels}, "value": [ts, "v"]}]``."""
        data = self.api("query", query=promql)
        return data["result"] if data else []

    def values(self, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
        """``promql``'s samples keyed by their sorted labels (``__name__`` dropped)."""
        return {
            tuple(sorted((k, v) for k, v in s["metric"].items() if k != "__name__")): float(
                s["value"][1]
            )
            for s in self.query(promql)
        }

    def active_targets(self) -> list[dict]:
        data = self.api("targets", state="active")
        return data["activeTargets"] if data else []

    def alerts(self) -> list[dict]:
        data = self.api("alerts")
        return data["alerts"] if data else []
