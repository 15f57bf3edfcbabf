"""SIGKILL of a reporting Ray worker loses only the contract's last window (issue 11).

A Ray actor reports as a training worker does, through ``Reporter(HubTransport(hub))`` to
the job's EventHub, while this process is the driver: its :class:`EventPump` polls the hub
every ``HUB_POLL_S`` into a real spool through the job's :class:`MetricSink`. After each
call returns, the actor writes the call's acknowledgement time (``CLOCK_MONOTONIC``, one
clock for every process on the machine) into a shared memory-mapped file, which survives
the kill. The actor's process is then SIGKILLed and the spool is read.

The contract (engage/events.py): a worker's point is on disk within the Reporter's age
limit plus the driver's next hub poll. So every point acknowledged more than that window
(plus slack for the Ray hop and the synced write on a loaded machine) before the kill is
in the spool *at the kill*; a worker that went quiet for longer loses nothing, which fails
if the Reporter sent its buffer only on the next call.

The benchmark ``benchmarks/tracking_durability.py`` measures the same loss window over
more trials and layouts (driver, node); this keeps the worker case in ``make test``.
"""

from __future__ import annotations

import mmap
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engage.events import HUB_POLL_S, MAX_AGE_S, EventPump, FanOut, start_hub
from engage.tracking import PipelineRun, Spool
from engage.tracking.sinks import MetricSink

pytestmark = pytest.mark.integration

METRICS = 10  # points per call, as a training step reports
PERIOD_S = 0.0025  # one call every 2.5 ms: 4,000 points/s
# The Ray hop worker -> hub -> driver and one synced SQLite transaction, on 2 shared cores.
SLACK_S = 1.0
WINDOW_S = MAX_AGE_S + HUB_POLL_S + SLACK_S
_CAPACITY = 1 << 14  # calls the acknowledgement map holds (41 s at 2.5 ms)


class _AckMap:
    """Acknowledged calls in a shared file mapping: slot 0 the count, slot 1+i call i's time."""

    def __init__(self, path: Path) -> None:
        with open(path, "a+b") as f:
            f.truncate(8 * (1 + _CAPACITY))
        self._file = open(path, "r+b")  # noqa: SIM115 - lives as long as the map
        self._map = mmap.mmap(self._file.fileno(), 8 * (1 + _CAPACITY))

    def acknowledge(self, call: int, at: float) -> None:
        """Record call ``call`` (0-based) as returned at monotonic time ``at``."""
        struct.pack_into("d", self._map, 8 * (1 + call), at)
        struct.pack_into("q", self._map, 0, call + 1)  # after the time: a counted call has one

    def times(self) -> list[float]:
        """The acknowledgement time of every counted call, in call order."""
        count = struct.unpack_from("q", self._map, 0)[0]
        return list(struct.unpack_from(f"{count}d", self._map, 8))


class _ReportingWorker:
    """The actor body: a worker's Reporter on the hub, reporting 10 metrics per call."""

    def pid(self) -> int:
        """The actor's process id (the test SIGKILLs it)."""
        return os.getpid()

    def report(self, hub, ack_path: str, calls: int) -> None:
        """Report ``calls`` calls every ``PERIOD_S``, acknowledging each, then idle until killed."""
        from engage.events import HubTransport, Reporter

        reporter = Reporter(HubTransport(hub), {"rank": "0"})
        acks = _AckMap(Path(ack_path))
        next_at = time.monotonic()
        for step in range(min(calls, _CAPACITY)):
            reporter.metrics({f"m{k}": k * 1000 + step for k in range(METRICS)}, step=step)
            acks.acknowledge(step, time.monotonic())
            next_at += PERIOD_S
            time.sleep(max(0.0, next_at - time.monotonic()))
        time.sleep(3600)


class _Driver:
    """The driver's side of a job: the hub, and a thread pumping it into a spooled run."""

    def __init__(self, home: Path) -> None:
        self.spool_path = home / "spool.db"
        spool = Spool(self.spool_path)
        uri = f"sqlite:///{home / 'mlflow.db'}"
        run = PipelineRun(spool, spool.create_run(uri, "durability", "r", {}), uri, "durability")
        self.hub = start_hub()
        self._pump = EventPump(self.hub, FanOut([MetricSink(run)]))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-pump", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(HUB_POLL_S):  # the trainer's loop: poll, then wait
            self._pump.poll()

    def finish(self) -> None:
        """Stop polling and collect what reached the hub before the kill (once)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=30)
        self._pump.finish(timeout_s=30.0)

    def spooled(self) -> list[tuple[str, int, float]]:
        """(metric, step, value) of every metric point in the spool, read on a new connection
        (a batch row holds many points: read them through the spool, not its rows)."""
        spool = Spool(self.spool_path)
        try:
            return [
                (e.key, e.step, e.value)
                for run in spool.runs()
                for e in spool.pending(run.local_id, 1 << 30)  # no drainer: nothing is sent
                if e.kind == "metric"
            ]
        finally:
            spool.close()


@pytest.fixture
def driver(tmp_path: Path, ray_local: None) -> Iterator[_Driver]:
    """A driver pumping a fresh hub into a spool under tmp_path; the hub is killed after."""
    import ray

    drv = _Driver(tmp_path)
    try:
        yield drv
    finally:
        drv.finish()
        ray.kill(drv.hub)


def _start_worker(driver: _Driver, ack_path: Path, calls: int) -> int:
    """Start a reporting actor (zero CPUs, as the hub); returns its process id."""
    import ray
    import ray.cloudpickle

    # The worker processes cannot import this test module: ship its code by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    worker = ray.remote(num_cpus=0, max_restarts=0)(_ReportingWorker).remote()
    pid = ray.get(worker.pid.remote(), timeout=60)
    worker.report.remote(driver.hub, str(ack_path), calls)
    return pid


def _wait_acked(acks: _AckMap, calls: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(acks.times()) < calls:
        assert time.monotonic() < deadline, f"the worker acknowledged {len(acks.times())} calls"
        time.sleep(0.05)


def _missing(spooled: list[tuple[str, int, float]], steps: range) -> list[tuple[str, int]]:
    """(metric, step) of the points of ``steps`` the spool lacks."""
    have = {(key, step) for key, step, _ in spooled}
    return [(f"m{k}", s) for s in steps for k in range(METRICS) if (f"m{k}", s) not in have]


def _assert_exact_once(spooled: list[tuple[str, int, float]]) -> None:
    keys = [(key, step) for key, step, _ in spooled]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} duplicate points"
    wrong = [(k, s, v) for k, s, v in spooled if v != int(k[1:]) * 1000 + s]
    assert not wrong, f"points with the wrong value: {wrong[:5]}"


def test_killed_reporting_worker_loses_only_the_last_window(
    driver: _Driver, tmp_path: Path
) -> None:
    acks = _AckMap(tmp_path / "ack")
    pid = _start_worker(driver, tmp_path / "ack", calls=_CAPACITY)
    _wait_acked(acks, 1)
    time.sleep(WINDOW_S + 1.5)  # 1.5 s of points older than the window at the kill
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    at_kill = driver.spooled()  # what is on disk at the kill: the contract's promise
    times = acks.times()  # the worker is dead: the count no longer moves
    old = range(sum(1 for t in times if t < killed_at - WINDOW_S))
    assert len(old) >= 0.75 / PERIOD_S, f"only {len(old)} calls were older than the window"
    missing = _missing(at_kill, old)
    assert not missing, (
        f"{len(missing)} points acknowledged more than {WINDOW_S:.2f} s before the kill were "
        f"not in the spool at the kill (first {missing[:3]}; {len(times)} calls acknowledged)"
    )
    driver.finish()  # what the hub got before the kill reaches the spool too
    spooled = driver.spooled()
    _assert_exact_once(spooled)
    assert not _missing(spooled, old)
    assert {step for _, step, _ in spooled} <= set(range(len(times) + 1))


def test_quiet_worker_killed_after_the_age_limit_loses_nothing(
    driver: _Driver, tmp_path: Path
) -> None:
    acks = _AckMap(tmp_path / "ack")
    pid = _start_worker(driver, tmp_path / "ack", calls=10)  # 100 points: no full batch
    _wait_acked(acks, 10)
    time.sleep(WINDOW_S)  # quiet past the age limit, the next poll and the slack
    os.kill(pid, signal.SIGKILL)
    at_kill = driver.spooled()
    missing = _missing(at_kill, range(10))
    assert not missing, (
        f"{len(missing)} of 100 points of a worker quiet for {WINDOW_S:.2f} s were not in the "
        f"spool at its kill: the Reporter must send its buffer on its age limit, not on a call"
    )
    driver.finish()
    spooled = driver.spooled()
    _assert_exact_once(spooled)
    assert len(spooled) == 10 * METRICS
