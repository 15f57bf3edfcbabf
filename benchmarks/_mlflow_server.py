"""A local `mlflow server` on 127.0.0.1 for benchmarks: start, wait for /health, SIGKILL, stop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

_MLFLOW = Path(sys.executable).with_name("mlflow")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalMlflowServer:
    """One `mlflow server --workers 1` on a SQLite backend under ``root``.

    The server runs in its own session, so killing its process group ends the CLI and the
    uvicorn worker it starts, and nothing else.
    """

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None
        self._log = root / "mlflow-server.log"

    def start(self, timeout_s: float = 120.0) -> float:
        """Start the server and return the seconds until /health answered."""
        started = time.perf_counter()
        args = [
            str(_MLFLOW),
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'server.db'}",
            "--default-artifact-root",
            str(self.root / "server-artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        with self._log.open("a") as log:
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait_healthy(started + timeout_s)
        return time.perf_counter() - started

    def _wait_healthy(self, deadline: float) -> None:
        while time.perf_counter() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited; see {self._log}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"mlflow server not healthy in time; see {self._log}")

    def kill(self) -> None:
        """SIGKILL the server's process group: no shutdown, requests in flight are cut."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, sig: int) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None
