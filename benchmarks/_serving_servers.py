"""The servers the serving benchmark compares, started and stopped by the benchmark itself.

``MlflowModelServer``: ``mlflow models serve`` of a registered version in its own session
(killing its process group ends the CLI, its uvicorn workers and nothing else).
``EngageApps``: ``engage deploy`` apps on the engage-managed Ray head of one home, each
under its own route prefix; ``stop`` runs ``engage serve stop``, which also ends that head.
``batch_stats``: requests and model calls of an app's replicas, from their /metrics.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_by_pid(roots: list[int]) -> dict[int, tuple[str, float, float]]:
    """(title, user + system CPU, create time) of ``roots`` and their descendants alive now,
    by pid (Ray names its workers ``ray::ServeReplica:APP:DEPLOYMENT``, ``ray::ProxyActor``...
    and renames a worker when it becomes an actor, so titles are read at each snapshot)."""
    import psutil

    out: dict[int, tuple[str, float, float]] = {}
    for pid in roots:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    cmd = p.cmdline()
                    title = cmd[0] if cmd and cmd[0].startswith("ray::") else p.name()
                    out[p.pid] = (title, t.user + t.system, p.create_time())
    return out


def cpu_delta(before: dict, after: dict, since: float) -> dict[str, float]:
    """CPU used between two ``cpu_by_pid`` snapshots, by process title. A process the first
    snapshot missed counts in full only if it started after ``since`` (a wall-clock time);
    one that existed already but was missed (a transient enumeration race) is left out
    rather than counted with its whole lifetime."""
    out: dict[str, float] = {}
    for pid, (title, cpu, created) in after.items():
        if pid in before:
            used = cpu - before[pid][1]
        elif created >= since:
            used = cpu
        else:
            continue
        out[title] = out.get(title, 0.0) + used
    return out


def cpu_by_process(roots: list[int]) -> dict[str, float]:
    """User + system CPU of ``roots`` and their descendants alive now, by process title."""
    out: dict[str, float] = {}
    for title, cpu, _created in cpu_by_pid(roots).values():
        out[title] = out.get(title, 0.0) + cpu
    return out


def cpu_seconds(roots: list[int]) -> float:
    """User + system CPU of ``roots`` and all their descendants (those alive now)."""
    return sum(cpu_by_process(roots).values())


def _wait_get(url: str, deadline: float, alive) -> None:
    while time.perf_counter() < deadline:
        if not alive():
            raise RuntimeError(f"server behind {url} exited")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
            if reply.status == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"{url} did not answer 200 in time")


class MlflowModelServer:
    """``mlflow models serve -m models:/NAME/VERSION --env-manager local --workers W``."""

    def __init__(self, model_uri: str, tracking_uri: str, workers: int, log: Path) -> None:
        self.model_uri, self.tracking_uri, self.workers, self.log = (
            model_uri,
            tracking_uri,
            workers,
            log,
        )
        self.port = free_port()
        self.pid: int | None = None
        self._proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 300.0) -> float:
        """Start it and return the seconds until /ping answered."""
        started = time.perf_counter()
        args = [
            str(_BIN / "mlflow"), "models", "serve", "-m", self.model_uri,
            "--env-manager", "local", "-h", "127.0.0.1", "-p", str(self.port),
            "--workers", str(self.workers),
        ]  # fmt: skip
        # It runs `uvicorn` by name: the venv's bin must be on PATH without an activated venv.
        path = f"{_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        env = {**os.environ, "MLFLOW_TRACKING_URI": self.tracking_uri, "PATH": path}
        with self.log.open("a") as log:
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.pid = self._proc.pid
        _wait_get(
            f"http://127.0.0.1:{self.port}/ping",
            started + timeout_s,
            lambda: self._proc is not None and self._proc.poll() is None,
        )
        return time.perf_counter() - started

    def pids(self) -> list[int]:
        """The CLI's pid: its descendants are the uvicorn master and workers."""
        return [self.pid] if self.pid else []

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None


class EngageApps:
    """``engage deploy`` apps of one home on one port, each at its own route prefix."""

    def __init__(self, home: Path, tracking_uri: str, log: Path) -> None:
        self.home, self.tracking_uri, self.log = home, tracking_uri, log
        self.port = free_port()
        self.deployed: list[str] = []

    def _engage(self, *args: str, timeout_s: float = 600.0) -> None:
        cmd = [str(_BIN / "engage"), *args, "--home", str(self.home)]
        with self.log.open("a") as log:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            done = subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, cwd=REPO
            )
        if done.returncode != 0:
            raise RuntimeError(f"`engage {' '.join(args)}` failed; see {self.log}")

    def deploy(self, model: str, app: str, replicas: int, hooks: bool = True) -> tuple[str, float]:
        """Serve ``model`` as ``app`` at /``app``; returns (predict path, seconds).

        ``hooks=False`` (the hooks-off arm) deploys through ``engage.serve.deploy_job``, the
        process the pipeline's deploy stage runs, since the CLI has no such switch."""
        started = time.perf_counter()
        self.deployed.append(app)
        if hooks:
            self._engage(
                "deploy", model, "--port", str(self.port), "--replicas", str(replicas),
                "--app", app, "--tracking-uri", self.tracking_uri, "--spec", str(REPO / "pipelines" / "quickstart.yaml"),
                "--set", f"deploy.route_prefix=/{app}",
            )  # fmt: skip
        else:
            self._deploy_job(model, app, replicas)
        _wait_get(
            f"http://127.0.0.1:{self.port}/{app}/health",
            time.perf_counter() + 60,
            lambda: True,
        )
        return f"/{app}/predict", time.perf_counter() - started

    def _deploy_job(self, model: str, app: str, replicas: int) -> None:
        from engage.spec import load_spec

        spec = load_spec(REPO / "pipelines" / "quickstart.yaml", []).spec.deploy
        spec = spec.model_copy(
            update={"port": self.port, "replicas": replicas, "app": app, "route_prefix": f"/{app}"}
        )
        options = {
            "model": model, "spec": spec.model_dump(mode="json"), "home": str(self.home),
            "tracking_uri": self.tracking_uri, "hooks": False,
        }  # fmt: skip
        with self.log.open("a") as log:
            log.write(f"$ python -m engage.serve.deploy_job  # {app}, hooks off\n")
            log.flush()
            done = subprocess.run(
                [sys.executable, "-m", "engage.serve.deploy_job"], input=json.dumps(options),
                stdout=log, stderr=subprocess.STDOUT, text=True, timeout=600, cwd=REPO,
            )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"deploying {app} (hooks off) failed; see {self.log}")

    def ingress(self) -> str:
        """How the managed head's HTTP entry reaches the replicas (engage.serve.cluster)."""
        state = json.loads((self.home / "serve" / "cluster.json").read_text())
        return str(state.get("ingress", "serve-proxy"))

    def pids(self) -> list[int]:
        """The managed Ray head's processes (GCS, raylet, ...): the Serve proxy, ingress and
        model replicas are their descendants."""
        state = json.loads((self.home / "serve" / "cluster.json").read_text())
        return list(state["pids"])

    def stop(self) -> None:
        """``engage serve stop``: every app of the home, then the managed Ray head."""
        if self.deployed:
            self._engage("serve", "stop", timeout_s=180)
            self.deployed = []


def batch_stats(home: Path, app: str) -> tuple[float, float]:
    """(requests answered, model calls) of ``app``'s replicas so far, from their Prometheus
    endpoints (``engage_batch_size``: one observation per model call, its sum the requests)."""
    from engage.monitor.discovery import list_targets

    total = calls = 0.0
    for target in list_targets(home):
        if target.get("app") != app:
            continue
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://{target['address']}/metrics", timeout=5) as reply,
        ):
            for line in reply.read().decode().splitlines():
                if line.startswith("engage_batch_size_sum{"):
                    total += float(line.rsplit(" ", 1)[1])
                elif line.startswith("engage_batch_size_count{"):
                    calls += float(line.rsplit(" ", 1)[1])
    return total, calls
