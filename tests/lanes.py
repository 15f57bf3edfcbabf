"""Run the whole suite as three pytest processes side by side: what ``make test`` calls.

Many system tests wait: on a Ray node starting, a served app answering, a Prometheus
rule's ``for`` running out, a killed tracking server coming back. The unit tests keep one
core busy. So the suite runs as three lanes, each a pytest process with its own temporary
directory, and takes about as long as its longest lane instead of the sum:

- the unit lane: the unit tests (the watched Prometheus job's set-up runs in their
  background, see tests/conftest.py), the notebooks and some system tests;
- the waiting lane: the tests that mostly wait on a tracking server, a drainer process or
  a CLI process (MLflow outages, PostgreSQL, the drainer, ``engage sync``, Ctrl-C, bad
  input, the federated CLI), little CPU each, whose waits the other lanes fill, and the
  dashboard's page tests and the serving listener test to even the lanes out;
- the system lane: every other integration and e2e test.

Lanes are balanced on per-module CPU and wall times of a full run (`--durations` in each
lane shows the slowest tests; a lane using ``ray_local`` starts its own Ray session, so the
tests that share it stay in one lane). The system lane streams to the terminal; the other
lanes' output is printed when they end. The exit status is the first non-zero status of
the lanes (0 when all pass).

Usage: ``python tests/lanes.py [extra pytest arguments]``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The lanes named here; the system lane is every other test folder. A path inside another
# lane's folder (tests/unit/tracking inside tests/unit) is ignored by the folder's lane.
NAMED_LANES = {
    "unit": [
        "tests/unit",
        "tests/notebooks",
        "tests/integration/test_cluster.py",
        "tests/integration/test_deploy_manifests.py",
        "tests/integration/test_promtool.py",
        "tests/integration/monitor/test_watched_job.py",
    ],
    "waiting": [
        "tests/unit/tracking",
        "tests/integration/tracking",
        "tests/e2e/test_sync.py",
        "tests/e2e/test_interrupt.py",
        "tests/e2e/test_bad_input.py",
        "tests/e2e/test_monitor_cli.py",
        "tests/e2e/test_federated_cli.py",
        # a loopback cluster of its own: its node start-up mostly waits
        "tests/integration/test_cluster_streaming.py",
        # CPU-bound, here to even out the lanes (a rehearsal at 2d3b54b: system 927 s,
        # unit 900 s, waiting 766 s; the listener test took 100 s of the system lane's)
        "tests/unit/dashboard",
        "tests/integration/serve/test_listener_auth.py",
    ],
}


def lanes() -> dict[str, list[str]]:
    """Each lane's pytest arguments: its paths, then ``--ignore`` for other lanes' paths in them."""
    folders = sorted(p for p in (REPO / "tests").iterdir() if p.is_dir() and p.name[0] not in "._")
    named = {name: [p for p in paths if (REPO / p).exists()] for name, paths in NAMED_LANES.items()}
    taken = {p for paths in named.values() for p in paths}
    system = [str(p.relative_to(REPO)) for p in folders if str(p.relative_to(REPO)) not in taken]
    chosen = {**named, "system": system}
    result = {}
    for name, paths in chosen.items():
        inside = [
            other
            for other_name, others in chosen.items()
            if other_name != name
            for other in others
            if any(Path(p) in Path(other).parents for p in paths)
        ]
        result[name] = paths + [f"--ignore={p}" for p in sorted(inside)]
    return result


COMMON = ["-q", "-p", "no:cacheprovider", "--durations=30"]


def main(extra: list[str]) -> int:
    """Start the lanes, stream the system lane, then print the others; return the status."""
    started = time.monotonic()
    quiet = list(NAMED_LANES)  # their output is printed when they end
    with (
        _postgres_for_the_lanes(),
        tempfile.TemporaryDirectory(prefix="engage-lanes-", ignore_cleanup_errors=True) as tmp,
    ):
        base = Path(tmp)
        logs = {name: (base / f"{name}.log").open("w") for name in quiet}
        procs = {name: _start(name, base, extra, stdout=logs[name]) for name in quiet}
        # The e2e quickstart must run beside other load (issue 13): the unit lane is it.
        procs["system"] = _start("system", base, extra, stdout=None, other_lane=procs["unit"].pid)
        # A CI time-out sends SIGTERM, which by default ends this process at once and
        # leaves the lanes running: raise instead, so the lanes are stopped below.
        signal.signal(signal.SIGTERM, _interrupted)
        try:
            codes = {name: proc.wait() for name, proc in procs.items()}
        finally:  # Ctrl-C or a CI time-out: stop every lane, not just the one waited on
            _stop(procs.values())
            for log in logs.values():
                log.close()
        for name in quiet:
            print(f"\n{'=' * 30} {name} lane {'=' * 30}", flush=True)
            print((base / f"{name}.log").read_text(), flush=True)
    took = time.monotonic() - started
    exits = ", ".join(f"{name} exit {code}" for name, code in codes.items())
    print(f"lanes: {exits}; the lanes together took {took:.0f} s ({took / 60:.1f} min)", flush=True)
    return next((code for code in codes.values() if code != 0), 0)


_STOP_GRACE_S = 30.0  # for the lanes' fixtures to stop their servers and clusters


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _stop(procs) -> None:
    """SIGINT to each running lane (pytest then tears its fixtures down: Ray clusters,
    servers), SIGKILL to those still running after the grace period."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + _STOP_GRACE_S
    for proc in running:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _postgres_for_the_lanes() -> Iterator[None]:
    """Debian's PostgreSQL cluster up while the lanes run, if it is installed and down.

    The tests that use it start it when it is down and stop it when they started it; run
    alone, that is right. Side by side, one lane would stop it under another lane's tests
    (a rehearsal did: the unit lane's last teardown found no server). Started here, every
    lane finds it running and leaves it, and it is stopped once all lanes are done.
    """
    if not (shutil.which("pg_lsclusters") and shutil.which("pg_ctlcluster")):
        yield
        return
    listed = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True)
    clusters = [line.split() for line in listed.stdout.splitlines() if line.strip()]
    if not clusters or clusters[0][3] == "online":
        yield
        return
    version, name = clusters[0][:2]
    # pg_ctlcluster drops to the postgres user: PostgreSQL refuses to run as root.
    subprocess.run(["pg_ctlcluster", version, name, "start"], check=True)
    try:
        yield
    finally:
        subprocess.run(["pg_ctlcluster", version, name, "stop"], check=False)


def _start(
    lane: str, base: Path, extra: list[str], stdout, other_lane: int | None = None
) -> subprocess.Popen:
    """One pytest process for ``lane``, with its own --basetemp so none cleans another's.

    ``other_lane``: the pid of a lane running beside it, in ``ENGAGE_TESTS_OTHER_LANE``.
    """
    args = [*lanes()[lane], *COMMON, f"--basetemp={base / lane}", *extra]
    env = dict(os.environ)
    env.pop("ENGAGE_TESTS_OTHER_LANE", None)
    if other_lane is not None:
        env["ENGAGE_TESTS_OTHER_LANE"] = str(other_lane)
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=REPO,
        env=env,
        stdout=stdout,
        stderr=subprocess.STDOUT,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
