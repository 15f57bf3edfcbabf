"""Real Ray for integration tests: one in-process local session, and a two-node loopback cluster.

The loopback cluster is started and stopped by process id (never `ray stop`, which kills every
Ray process on the machine, other people's included). See /work/shared/NOTES.md, "Ray on 2 cores".
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
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from _prometheus import Prometheus

VENV_BIN = Path(sys.executable).parent
_NODE_READY_S = 90.0
SECOND_NODE_RESOURCES = {"node_b": 2}  # custom resources only the loopback cluster's 2nd node has
# The test cluster's own Ray settings (its nodes' `ray start` environment; engage's are
# untouched), so a lost node costs the time the recovery needs, not Ray's waits:
_TEST_CLUSTER_ENV = {
    # The GCS declares a node dead after `failure_threshold` failed health checks
    # `period_ms` apart (Ray's defaults: 5 x 3 s, ~15-20 s). A killed node's raylet refuses
    # the check at once, so 3 x 1 s finds it in ~3 s; a check that only runs slow under load
    # still has Ray's full per-check timeout (10 s) before it counts as a failure.
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    # Right after a node is lost, Ray Train's elastic controller still sees its resources
    # and asks for the full worker group; that placement group can never be ready and the
    # controller waits this long (default 60 s) before it retries with the nodes left.
    # A placement group on free resources is ready in well under a second here (0.01-0.22 s
    # at load 12 on 2 cores); one that times out is simply retried (a controller error,
    # retried without limit).
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "5",
}


_RAY_LOCAL_LAST = pytest.StashKey[bool]()
_ray_started_here: list[bool] = []  # True once ray_local has called ray.init itself


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray session shared by in-process tests (engage's ``ray_session`` reuses it).

    ``address="local"``: without it ray.init attaches to whatever cluster already runs here.
    It is shut down right after the last test that uses it (``pytest_runtest_teardown``
    below), not at the end of the session: an idle local cluster is some twenty processes
    that take ~7% of a core and memory from every test that follows.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    from engage import env_vars

    env_vars.set_third_party_defaults()  # what the `engage` command sets for its clusters
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=True,
        logging_level="WARNING",
        log_to_driver=False,
    )
    _ray_started_here.append(True)
    yield
    _shutdown_ray_local()


def _shutdown_ray_local() -> None:
    if _ray_started_here:
        import ray

        ray.shutdown()
        _ray_started_here.clear()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the last collected test that uses ``ray_local``."""
    users = [item for item in items if "ray_local" in getattr(item, "fixturenames", ())]
    if users:
        users[-1].stash[_RAY_LOCAL_LAST] = True


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last ``ray_local`` test, stop the local Ray session it started."""
    if item.stash.get(_RAY_LOCAL_LAST, False):
        _shutdown_ray_local()


def free_port() -> int:
    """A TCP port nobody listens on right now (closed again before returning)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LoopbackCluster:
    """A head node and a second node started by this test session, on this machine."""

    address: str  # GCS host:port, what `engage run --address` takes
    dashboard_url: str  # State API endpoint
    env: dict[str, str]  # token auth for every process that talks to the cluster
    root: Path  # holds both nodes' --temp-dir; every Ray process of ours names it
    procs: list[subprocess.Popen] = field(default_factory=list)

    def python(self, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``code`` in a fresh interpreter with the cluster's auth env (isolates Ray's state)."""
        return subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def state(self, code: str) -> object:
        """Evaluate ``code`` (State API calls against this cluster) and return its JSON result."""
        done = self.python(
            "import json\nfrom ray.util import state\n"
            f"URL = {self.dashboard_url!r}\nprint(json.dumps({code}))"
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


def _start_node(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    # --block keeps `ray start` in the foreground as the parent of the node's processes;
    # its own session makes the node one process group we can signal.
    with log.open("w") as out:
        return subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--block", "--disable-usage-stats", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for_nodes(cluster: LoopbackCluster, n: int) -> None:
    code = f"""
import time
from ray.util.state import list_nodes
deadline = time.monotonic() + {_NODE_READY_S}
while True:
    try:
        alive = [x for x in list_nodes(address={cluster.dashboard_url!r}) if x.state == "ALIVE"]
    except Exception as exc:
        alive, last = [], exc
    if len(alive) >= {n}:
        break
    if time.monotonic() > deadline:
        raise SystemExit(f"only {{len(alive)}} nodes alive after {_NODE_READY_S}s")
    time.sleep(1)
"""
    done = cluster.python(code, timeout=_NODE_READY_S + 30)
    logs = "\n".join(log.read_text()[-2000:] for log in sorted(cluster.root.glob("*.log")))
    for proc in cluster.procs:
        assert proc.poll() is None, f"`ray start` exited with {proc.returncode}:\n{logs}"
    assert done.returncode == 0, f"{done.stderr[-2000:]}\n{logs}"


def _wait_for_gcs(cluster: LoopbackCluster) -> None:
    """Wait until the head's GCS port accepts connections (the head's `ray start` alive)."""
    host, _, port = cluster.address.rpartition(":")
    deadline = time.monotonic() + _NODE_READY_S
    while True:
        head = cluster.procs[0]
        if head.poll() is not None:
            log = (cluster.root / "head.log").read_text()[-2000:]
            raise AssertionError(f"`ray start --head` exited with {head.returncode}:\n{log}")
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=1):
            return
        assert time.monotonic() < deadline, f"no GCS on {cluster.address} after {_NODE_READY_S}s"
        time.sleep(0.2)


def _ours(cluster: LoopbackCluster, known: list[psutil.Process]) -> list[psutil.Process]:
    """Live processes of this cluster: the known tree plus anything naming our temp dir."""
    found = {p.pid: p for p in known if p.is_running()}
    for p in psutil.process_iter(["cmdline"]):
        if any(str(cluster.root) in part for part in p.info["cmdline"] or ()):
            found.setdefault(p.pid, p)
    return list(found.values())


def stop_cluster(cluster: LoopbackCluster) -> list[str]:
    """SIGKILL every process of the cluster at once; returns survivors.

    The test is over and nothing of the cluster outlives it (its temp dir is removed
    next; the object store's shared memory is unlinked when created), so its processes
    are not asked to stop politely: SIGTERM and a grace period cost each teardown ~5 s.
    """
    tree: list[psutil.Process] = []
    for proc in cluster.procs:
        try:
            root = psutil.Process(proc.pid)
            tree += [root, *root.children(recursive=True)]  # workers get their own pgid
        except psutil.NoSuchProcess:
            pass
    for proc in cluster.procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for p in _ours(cluster, tree):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    _, alive = psutil.wait_procs(_ours(cluster, tree), timeout=10)
    for proc in cluster.procs:
        proc.wait(timeout=10)
    return [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in alive if p.is_running()]


@pytest.fixture
def loopback_cluster() -> Iterator[LoopbackCluster]:
    """A two-node Ray cluster (1 CPU each) on this machine with token auth, stopped by PID.

    Only the second node offers the custom resource ``node_b`` (``SECOND_NODE_RESOURCES``),
    so a job asking for it must run there.
    """
    # Short root: Ray's Unix socket paths live under it (108-byte limit).
    root = Path(tempfile.mkdtemp(prefix="eg-", dir="/tmp"))
    token = root / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    node_env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | env | _TEST_CLUSTER_ENV
    port, dashboard = free_port(), free_port()
    cluster = LoopbackCluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}", env, root)
    # Every fixed default port is made explicit so a cluster someone else runs here can't clash.
    # Ray rewrites 127.0.0.1 to the host's own IP for the node address; the GCS stays reachable
    # on loopback, which is all the driver needs.
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1"]
    try:
        cluster.procs.append(
            _start_node(
                [
                    "--head",
                    f"--port={port}",
                    f"--temp-dir={root / 'a'}",
                    "--dashboard-host=127.0.0.1",
                    f"--dashboard-port={dashboard}",
                    f"--ray-client-server-port={free_port()}",
                    f"--dashboard-agent-listen-port={free_port()}",
                    *common,
                ],
                node_env,
                root / "head.log",
            )
        )
        # The second node needs only the head's GCS to join; the dashboard (State API) the
        # check below waits for comes up meanwhile, instead of before the second node starts.
        _wait_for_gcs(cluster)
        cluster.procs.append(
            _start_node(
                [
                    f"--address={cluster.address}",
                    f"--temp-dir={root / 'b'}",
                    f"--dashboard-agent-listen-port={free_port()}",
                    f"--resources={json.dumps(SECOND_NODE_RESOURCES)}",
                    *common,
                ],
                node_env,
                root / "node.log",
            )
        )
        _wait_for_nodes(cluster, 2)
        yield cluster
    finally:
        survivors = stop_cluster(cluster)
        shutil.rmtree(root, ignore_errors=True)
    assert not survivors, f"Ray processes of the test cluster survived teardown: {survivors}"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    """Prometheus on loopback in tmp_path, on the shipped deploy/prometheus config with 1 s
    intervals; it discovers every job whose ENGAGE_HOME is tmp_path/.engage. Yields its URL."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed; `make test` installs it (Debian package prometheus)")
    server = Prometheus(tmp_path).start()
    try:
        yield server.url
    finally:
        server.stop()
