"""Harness for the tracking tests: a real `mlflow server`, a PostgreSQL database, the job.

Plain helpers, no pytest here, so tests/e2e can load them too. Every process is started in
its own session and killed by process id or group, never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

VENV_BIN = Path(sys.executable).parent
JOB_SCRIPT = Path(__file__).with_name("_job.py")
_READY_TIMEOUT_S = 180.0


def free_port() -> int:
    """A TCP port nobody listens on right now (closed again before returning)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env() -> dict[str, str]:
    """Environment for `mlflow server` on loopback.

    MLflow 3.17's security middleware already accepts Host 127.0.0.1 on any port (its
    default allows localhost variants and private ranges), so nothing is needed for it.
    Job execution is switched off: it starts seven huey consumers (startup went from 8 s
    to 23 s on 2 cores) and a temp folder in /dev/shm that a SIGKILL would leak.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    return env


@dataclass
class MlflowServer:
    """`mlflow server` on 127.0.0.1 over one backend store; start, SIGKILL, start again."""

    backend_uri: str
    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    startups_s: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def start(self) -> float:
        """Start the server and wait for ``GET /health``; returns the seconds it took."""
        assert self.proc is None, "already running"
        self.root.mkdir(parents=True, exist_ok=True)
        args = [
            str(VENV_BIN / "mlflow"),
            "server",
            f"--backend-store-uri={self.backend_uri}",
            f"--artifacts-destination={self.root / 'artifacts'}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            "--workers=1",
        ]
        started = time.monotonic()
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                args, env=server_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        while not _healthy(self.url):
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() - started > _READY_TIMEOUT_S:
                self.kill()
                raise RuntimeError(f"mlflow server not healthy after {_READY_TIMEOUT_S}s")
            time.sleep(0.1)
        self.startups_s.append(time.monotonic() - started)
        return self.startups_s[-1]

    def kill(self) -> None:
        """SIGKILL the server's whole process group and wait until every process is gone."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        tree = _tree(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in tree:  # a child that left the group (none does today) still goes
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        _, alive = psutil.wait_procs(tree, timeout=15)
        proc.wait(timeout=15)
        assert not alive, f"mlflow server processes survived SIGKILL: {alive}"

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


# -- PostgreSQL (Debian's cluster, see /work/shared/NOTES.md) ------------------------------------


@dataclass
class PostgresCluster:
    """The first Debian cluster (``pg_lsclusters``); started here only if it was down."""

    version: str
    name: str
    port: int
    started_here: bool = False

    @classmethod
    def find(cls) -> PostgresCluster | None:
        """The cluster, or None when PostgreSQL is not installed; raises when it has none."""
        if not shutil.which("pg_lsclusters") or not shutil.which("pg_ctlcluster"):
            return None
        done = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True)
        lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"PostgreSQL is installed but has no cluster: {done.stderr}")
        version, name, port, *_ = lines[0]
        if not Path(f"/usr/lib/postgresql/{version}/bin/postgres").exists():
            return None
        return cls(version, name, int(port))

    def ensure_running(self) -> None:
        status = subprocess.run(["pg_ctlcluster", self.version, self.name, "status"])
        if status.returncode != 0:  # 3: down
            # pg_ctlcluster drops to the postgres user: PostgreSQL refuses to run as root.
            subprocess.run(["pg_ctlcluster", self.version, self.name, "start"], check=True)
            self.started_here = True

    def stop_if_started_here(self) -> None:
        if self.started_here:
            subprocess.run(["pg_ctlcluster", self.version, self.name, "stop"], check=False)

    def psql(self, *sql: str, database: str = "postgres") -> None:
        """Run statements as the postgres superuser (over its Unix socket, peer auth)."""
        command = ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-p", str(self.port), "-d", database]
        for statement in sql:
            command += ["-c", statement]
        user = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
        done = subprocess.run([*user, *command], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")


@dataclass
class PostgresDatabase:
    """A role with a password and a database it owns, unique to one test session."""

    cluster: PostgresCluster
    role: str = field(default_factory=lambda: f"engage_t_{secrets.token_hex(4)}")
    password: str = field(default_factory=lambda: secrets.token_hex(12))

    @property
    def name(self) -> str:
        return self.role

    @property
    def dsn(self) -> str:
        # TCP on 127.0.0.1 with a password: root's peer auth over the socket fails (NOTES.md).
        return f"postgresql://{self.role}:{self.password}@127.0.0.1:{self.cluster.port}/{self.name}"

    @property
    def uri(self) -> str:
        """The backend store URI for MLflow.

        The driver is explicit: SQLAlchemy 2.1 maps a bare ``postgresql://`` to psycopg 3,
        which is not installed (psycopg2-binary is), and the server then fails to start.
        """
        return self.dsn.replace("postgresql://", "postgresql+psycopg2://", 1)

    def create(self) -> None:
        self.cluster.psql(
            f"CREATE ROLE {self.role} LOGIN PASSWORD '{self.password}'",
            f"CREATE DATABASE {self.name} OWNER {self.role}",
        )

    def drop(self) -> None:
        self.cluster.psql(
            f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)", f"DROP ROLE IF EXISTS {self.role}"
        )

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        import psycopg2

        with contextlib.closing(psycopg2.connect(self.dsn)) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()


# -- the job (_job.py) as a subprocess -----------------------------------------------------------


@dataclass
class Job:
    """``_job.py`` running in its own process; stdout lines are collected as they come."""

    proc: subprocess.Popen
    out: Path
    lines: list[dict] = field(default_factory=list)
    _stderr: object = None

    @classmethod
    def start(cls, home: Path, uri: str, experiment: str, *extra: str) -> Job:
        out = home.parent / "job-out"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env["ENGAGE_HOME"] = str(home)
        stderr = (home.parent / "job-stderr").open("w")
        proc = subprocess.Popen(
            [sys.executable, str(JOB_SCRIPT), "--home", str(home), "--uri", uri,
             "--experiment", experiment, "--out", str(out), *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        job = cls(proc, out, _stderr=stderr)
        threading.Thread(target=job._read, daemon=True).start()
        return job

    def _read(self) -> None:
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.lines.append(json.loads(line))

    @property
    def acked(self) -> int:
        return max((x["acked"] for x in self.lines if "acked" in x), default=0)

    @property
    def stderr(self) -> str:
        return (self.out.parent / "job-stderr").read_text(errors="replace")

    def wait_acked(self, n: int, timeout: float = 120) -> float:
        """Block until the job has acknowledged ``n`` points; returns time.time() then."""
        deadline = time.monotonic() + timeout
        while self.acked < n:
            assert self.proc.poll() is None, f"job exited {self.proc.returncode}:\n{self.stderr}"
            assert time.monotonic() < deadline, f"job acked {self.acked} < {n}:\n{self.stderr}"
            time.sleep(0.02)
        return time.time()

    def finish(self, timeout: float = 240) -> dict:
        """Wait for the job to exit; returns its summary (the last stdout line)."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        time.sleep(0.1)  # the reader thread takes the last line
        assert self.proc.returncode == 0, f"job exited {self.proc.returncode}:\n{self.stderr}"
        return self.lines[-1]

    def kill(self) -> None:
        """SIGKILL the job if it still runs (it has no child processes)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        self._stderr.close()

    def acknowledged_points(self) -> list[tuple[str, int, int, float]]:
        """(key, step, timestamp_ms, value) of every point whose Reporter.flush() returned."""
        acked_file = self.out / "acked"
        acked = int(acked_file.read_text().split()[-1]) if acked_file.exists() else 0
        lines = (self.out / "points.jsonl").read_text().splitlines() if acked else []
        return [tuple(json.loads(line)) for line in lines[:acked]]

    def latency(self) -> list[tuple[float, float]]:
        """(wall time, slowest report call of that step) for each step."""
        return [tuple(x) for x in json.loads((self.out / "latency.json").read_text())]


def metric_rows(client, run_id: str, keys: list[str]) -> dict[str, list[tuple[int, int, float]]]:
    """Every stored (step, timestamp, value) per key, sorted; duplicates kept."""
    return {
        key: sorted((m.step, m.timestamp, m.value) for m in client.get_metric_history(run_id, key))
        for key in keys
    }
