"""Durability under SIGKILL (issue 11): which acknowledged points a kill can lose.

A reporter reports 10 metrics per call at a steady rate and, after every call returns,
records the call's acknowledgement time (``CLOCK_MONOTONIC``, one clock for every process)
in a shared memory-mapped file (it survives the kill). The process is then SIGKILLed and
the spool is read: every acknowledged point that is not in it is lost, and the loss window
is how long before the kill the oldest lost point was acknowledged. Three layouts, each as
engage runs it, and a baseline:

- worker: a Ray actor reports through ``Reporter(HubTransport(hub))`` to the job's
  EventHub actor, and a driver process drains the hub every 0.25 s (as the trainer does)
  into the spool; the worker's process is SIGKILLed, the driver lives on.
- driver (= node on one machine): the same, but the driver process is SIGKILLed; the
  embedded Ray cluster fate-shares with it, so the hub and the worker die too.
- driver reporter: the driver's own ``Reporter(FanOut([MetricSink]))`` straight into the
  spool (stage metrics, the federated job), SIGKILLed.
- driver, pump before the fix (baseline): the driver layout with ``DRAIN_HOP_S = 0``, the
  pump as it was before issue 11's fix: a drain started at one poll was collected only at
  the next, so events waited in the hub for two poll intervals.

Each layout also runs one "quiet" trial: 10 calls, then 1.5 s of nothing, then the kill;
the contract says all 10 are on disk by then.

    python benchmarks/tracking_durability.py [--trials 3] [--period-ms 2.5]
        [--layouts "driver reporter,worker,driver,driver, pump before the fix"]
"""

from __future__ import annotations

import argparse
import mmap
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import git_commit, machine, write_section

METRICS = 10
BASELINE = "driver, pump before the fix"
LAYOUTS = ("driver reporter", "worker", "driver", BASELINE)
_HERE = Path(__file__).resolve()


# -- the processes under test --------------------------------------------------------------
_CAPACITY = 1 << 15  # calls whose acknowledgement time is kept (82 s at 2.5 ms)


class _Ack:
    """Acknowledged calls in a shared file mapping (survives SIGKILL): slot 0 the count,
    slot 1 + i the monotonic time call i returned."""

    def __init__(self, path: Path) -> None:
        with open(path, "a+b") as f:
            f.truncate(8 * (1 + _CAPACITY))
        self._file = open(path, "r+b")  # noqa: SIM115
        self._map = mmap.mmap(self._file.fileno(), 8 * (1 + _CAPACITY))

    def set(self, n: int) -> None:
        if n <= _CAPACITY:
            struct.pack_into("d", self._map, 8 * n, time.monotonic())
        struct.pack_into("q", self._map, 0, n)  # after the time: a counted call has one

    def get(self) -> int:
        return struct.unpack_from("q", self._map, 0)[0]

    def times(self) -> list[float]:
        n = min(self.get(), _CAPACITY)
        return list(struct.unpack_from(f"{n}d", self._map, 8))


def _report_loop(reporter, ack_path: str, period_s: float, calls: int | None) -> None:
    """Report 10 metrics per call every ``period_s``; ``calls`` then go quiet, else forever."""
    ack = _Ack(Path(ack_path))
    step, next_at = 0, time.perf_counter()
    while calls is None or step < calls:
        reporter.metrics({f"m{k}": k * 1000 + step for k in range(METRICS)}, step=step)
        step += 1
        ack.set(step)
        next_at += period_s
        time.sleep(max(0.0, next_at - time.perf_counter()))
    time.sleep(3600)


def _open_run(home: Path):
    from engage.tracking import PipelineRun, Spool

    spool = Spool(home / "spool.db")
    uri = f"sqlite:///{home / 'mlflow.db'}"
    return PipelineRun(spool, spool.create_run(uri, "durability", "r", {}), uri, "durability")


def role_plain(home: Path, ack: str, period_s: float, calls: int | None) -> None:
    """The driver's own reporter, straight into the spool."""
    from engage.events import FanOut, Reporter
    from engage.tracking.sinks import MetricSink

    run = _open_run(home)
    (home / "ready").write_text(str(os.getpid()))
    _report_loop(Reporter(FanOut([MetricSink(run)]), {"rank": "0"}), ack, period_s, calls)


def role_ray(
    home: Path, ack: str, period_s: float, calls: int | None, hop_s: float | None = None
) -> None:
    """A driver with an embedded Ray cluster, a hub, one reporting worker, and the pump
    (``hop_s`` overrides how long a poll waits for the drain it starts)."""
    import ray

    from engage import events
    from engage.events import EventPump, FanOut, HubTransport, Reporter, start_hub
    from engage.tracking.sinks import MetricSink

    if hop_s is not None:
        events.DRAIN_HOP_S = hop_s

    run = _open_run(home)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    hub = start_hub()
    ray.get(hub.drain.remote())  # the hub's process is up before anyone reports
    seen: list[int] = []
    pump = EventPump(hub, FanOut([MetricSink(run), _Seen(seen)]))

    @ray.remote(num_cpus=0)
    class Worker:
        def pid(self) -> int:
            return os.getpid()

        def run(self) -> None:
            _report_loop(Reporter(HubTransport(hub), {"rank": "0"}), ack, period_s, calls)

    worker = Worker.remote()
    worker_pid = ray.get(worker.pid.remote())
    worker.run.remote()
    warm_by = time.monotonic() + 120
    while calls is None and not seen:  # a steady stream: time the kill from the first
        pump.poll()  # batch spooled, not from Ray's start-up (seconds on a loaded machine)
        time.sleep(0.05)
        if time.monotonic() > warm_by:
            raise RuntimeError("no report reached the spool within 120 s")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    (home / "ready").write_text(f"{os.getpid()} {worker_pid}")
    while not stop:
        pump.poll()
        time.sleep(0.25)  # the trainer's poll interval (engage.train.trainer._POLL_S)
    pump.finish(timeout_s=5.0)  # what reached the hub before the worker died, then stop
    os._exit(0)  # no Ray shutdown: seconds, and nothing left to save


class _Seen:
    """A sink that notes that a batch came through (the pipeline is warm)."""

    def __init__(self, seen: list[int]) -> None:
        self._seen = seen

    def emit(self, events: list) -> None:
        self._seen.append(len(events))


# -- the harness ---------------------------------------------------------------------------
def _spooled_steps(home: Path) -> dict[int, int]:
    """Metric points in the spool per step (read through the spool: a row holds a batch)."""
    from collections import Counter

    from engage.tracking import Spool

    spool = Spool(home / "spool.db")
    try:
        return Counter(
            e.step
            for run in spool.runs()
            for e in spool.pending(run.local_id, 1 << 30)  # no drainer ran: nothing is sent
            if e.kind == "metric"
        )
    finally:
        spool.close()


def trial(layout: str, period_s: float, kill_after_s: float, quiet: bool) -> dict:
    """One kill; returns acknowledged calls, lost points and the loss window in seconds."""
    with tempfile.TemporaryDirectory(prefix="engage-durability-") as tmp:
        home = Path(tmp)
        ack_path = home / "ack"
        _Ack(ack_path)
        role = "plain" if layout == "driver reporter" else "ray"
        hop = ["--hop-s", "0"] if layout == BASELINE else []
        calls = 10 if quiet else None
        args = [sys.executable, str(_HERE), "--role", role, "--home", str(home), "--ack"]
        args += [str(ack_path), "--period-ms", str(period_s * 1e3)]
        args += ["--calls", str(calls)] if calls else []
        args += hop
        proc = subprocess.Popen(args, start_new_session=True)
        while not (home / "ready").exists():
            if proc.poll() is not None:
                raise RuntimeError(f"the {layout} process exited with {proc.returncode}")
            time.sleep(0.1)
        pids = [int(p) for p in (home / "ready").read_text().split()]
        started = time.monotonic()
        time.sleep(1.5 if quiet else kill_after_s)
        killed_at = time.monotonic()
        if layout == "worker":
            os.kill(pids[1], signal.SIGKILL)
            times, elapsed = _Ack(ack_path).times(), time.monotonic() - started
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            times, elapsed = _Ack(ack_path).times(), time.monotonic() - started
            proc.wait(timeout=60)
        spooled = _spooled_steps(home)
    acked = len(times)
    short = {step: METRICS - min(spooled.get(step, 0), METRICS) for step in range(acked)}
    lost_steps = [step for step, n in short.items() if n]
    rate = acked / elapsed if not quiet else 0.0
    return {
        "acked_points": acked * METRICS,
        "lost_points": sum(short.values()),
        # the oldest lost point's age at the kill: everything older is on disk
        "window_s": killed_at - times[lost_steps[0]] if lost_steps else 0.0,
        "rate_pps": rate * METRICS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="SIGKILL trials per layout")
    parser.add_argument("--period-ms", type=float, default=2.5, help="ms between report calls")
    parser.add_argument(
        "--layouts",
        default=";".join(LAYOUTS),
        help=f"layouts to kill, separated by ';' (default: {';'.join(LAYOUTS)})",
    )
    parser.add_argument("--role", choices=["plain", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ack", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--hop-s", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    period_s = args.period_ms / 1e3
    if args.role:
        if args.role == "plain":
            return role_plain(args.home, args.ack, period_s, args.calls)
        return role_ray(args.home, args.ack, period_s, args.calls, args.hop_s)
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict]] = {}
    quiet: dict[str, dict] = {}
    layouts = args.layouts.split(";")
    if unknown := [layout for layout in layouts if layout not in LAYOUTS]:
        parser.error(f"unknown layouts {unknown}; choose from {'; '.join(LAYOUTS)}")
    for layout in layouts:
        quiet[layout] = trial(layout, period_s, 0.0, quiet=True)
        results[layout] = []
    for i in range(args.trials):  # rounds of every layout, so load changes hit them alike
        for layout in layouts:
            results[layout].append(trial(layout, period_s, 2.0 + 0.37 * i, quiet=False))
            print(layout, i, results[layout][-1], flush=True)
    body = report(args, results, quiet, (load_before, os.getloadavg()[0]))
    write_section("durability", body)
    print(body)


def contract_s(layout: str) -> float:
    """The contract's window for a layout: the Reporter's age limit, plus the hub poll
    when the points travel through the hub (events.py)."""
    from engage.events import HUB_POLL_S, MAX_AGE_S

    return MAX_AGE_S if layout == "driver reporter" else MAX_AGE_S + HUB_POLL_S


def _versus(median: dict[str, float]) -> str:
    """The driver layout's median window against the baseline's, when both ran."""
    if "driver" not in median or BASELINE not in median:
        return ""
    ratio = median[BASELINE] / max(median["driver"], 1e-3)
    return (
        f"Driver layout against the baseline measured in the same run (the pump as it was): "
        f"median window {1e3 * median['driver']:.0f} ms against "
        f"{1e3 * median[BASELINE]:.0f} ms, **{ratio:.1f}× shorter**. "
    )


def report(args, results: dict, quiet: dict, load: tuple[float, float]) -> str:
    rows = []
    for layout, trials in results.items():
        lost = [t["lost_points"] for t in trials]
        windows = [t["window_s"] for t in trials]
        rows.append(
            f"| {layout} | {len(trials)} | {statistics.fmean(t['rate_pps'] for t in trials):.0f} | "
            f"{min(t['acked_points'] for t in trials)}–{max(t['acked_points'] for t in trials)} | "
            f"{min(lost)}–{max(lost)} | {1e3 * statistics.median(windows):.0f} / "
            f"{1e3 * max(windows):.0f} | {1e3 * contract_s(layout):.0f} | "
            f"{sum(w <= contract_s(layout) for w in windows)} of {len(windows)} | "
            f"{quiet[layout]['lost_points']} of {quiet[layout]['acked_points']} |"
        )
    flags = f"--trials {args.trials} --period-ms {args.period_ms:g}"
    if args.layouts != ";".join(LAYOUTS):
        flags += f' --layouts "{args.layouts}"'
    median = {k: statistics.median(t["window_s"] for t in v) for k, v in results.items()}
    return f"""## Durability under SIGKILL (issue 11)

Machine: {machine()}. Commit {git_commit()}. Command:
`python benchmarks/tracking_durability.py {flags}`. Load average (1 min) {load[0]:.1f} at
the start, {load[1]:.1f} at the end (a shared machine).

A reporter makes one call of 10 metrics every {args.period_ms:g} ms and records, after each
call returns, the time it returned (`CLOCK_MONOTONIC`) in a memory-mapped file; then a
SIGKILL (2.0 s + 0.37 s × trial after the start; in the Ray layouts, after the first batch
reached the spool, so Ray's start-up is not in the window), and the spool is read. The
layouts' trials are interleaved round by round, so load changes hit them alike. *Lost* = acknowledged points not in the spool; the
*window* is how long before the kill the oldest lost point was acknowledged: every point
older than that was on disk. The quiet trial makes 10 calls, waits 1.5 s and is then
killed. The same worker case runs in `make test`
(tests/integration/tracking_ray/test_worker_kill_durability.py).

| killed | trials | points/s | acknowledged | lost | window median / max ms | contract ms | trials within | quiet trial lost |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

{_versus(median)}The cause of the driver's
long window: between a worker's call and the spool commit, its points wait in the worker's
Reporter (a 256-point batch: 64 ms at this rate), then in the hub until the driver's pump
collects them. The pump alternated: one poll started a drain, the next collected its
answer, so the hub was emptied only every other poll (every 0.5 s) and each drain's events
reached the spool 0.25 s after the hub gave them up: a point that reached the hub just
after a drain waited up to 0.75 s, and a killed driver (the hub dies with it) lost all of
that. A killed worker loses only its Reporter's buffer: the driver lives on and collects
the hub. Since the fix a poll waits up to `DRAIN_HOP_S` (50 ms) for the drain it starts,
so the hub is emptied into the spool at every poll; what remains of the driver's window is
the worker's batch (64 ms at this rate), the wait for the next poll (0 to 0.25 s) and the
hop and commit.

The contract (events.py, README): a point is in the spool, synced to disk, within 0.5 s of
the call on the driver; a worker's point within 0.5 s plus the driver's next hub poll
(0.25 s) and the hop to the driver. So a kill can lose at most the points reported in that
last window, never older ones, and a quiet reporter loses nothing. Everything in the spool
reaches MLflow (by the job's drainer, or `engage sync` after a crash). The contract's
windows assume a driver that gets the CPU to poll and write: on a saturated machine the
driver's pump and spool write run late, and the window stretches by that delay.
"""


if __name__ == "__main__":
    main()
