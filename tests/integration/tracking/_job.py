"""A tracked job for the outage and crash tests, run as ``python _job.py ...``.

It reports metrics the way a pipeline stage does: Reporter -> FanOut -> spool sink (as
engage's ``MetricSink``), with a Drainer thread sending the spool to MLflow. Metric ``m<k>``
at step ``s`` has value ``k * 1000 + s / 2``; timestamps are the Reporter's own.

Files written under ``--out`` (each fsynced before the next line is acknowledged):

- ``points.jsonl``: ``[key, step, timestamp_ms, value]`` of every acknowledged point;
- ``acked``: one count per line, appended after ``Reporter.flush()`` returned;
- ``latency.json``: per step, ``[wall time, slowest report call of the step in s]``.

stdout: ``{"acked": n}`` after each acknowledgement, then one summary JSON line.
stderr: the drainer's warnings, one line each, prefixed ``engage-warning:``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from engage.events import Event, FanOut, Reporter
from engage.tracking import Drainer, PipelineRun, Spool


class _SpoolSink:
    """What ``engage.tracking.sinks.MetricSink`` does: metric events into the run's spool."""

    def __init__(self, run: PipelineRun) -> None:
        self._run = run

    def emit(self, events: list[Event]) -> None:
        self._run.log_metric_events(events)


class _Recorder:
    """Keeps every event it sees; the job writes them out when they are acknowledged."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, events: list[Event]) -> None:
        self.events.extend(events)


def _append_synced(path: Path, lines: list[str]) -> None:
    with path.open("a") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--home", type=Path, required=True)
    p.add_argument("--uri", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--metrics", type=int, default=10)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=8.0, help="pace the steps over this long")
    p.add_argument("--ack-every", type=int, default=50, help="steps between Reporter.flush()")
    p.add_argument("--flush-timeout", type=float, default=60.0)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)

    spool = Spool(a.home / "spool.db")
    drainer = Drainer(
        spool.path, warn=lambda m: print(f"engage-warning: {m}", file=sys.stderr, flush=True)
    ).start()
    run = PipelineRun.start(spool, a.uri, a.experiment, "outage-job", {"engage.test": "1"}, a.home)
    recorder = _Recorder()
    reporter = Reporter(FanOut([_SpoolSink(run), recorder]), {"stage": "test"})

    calls: list[float] = []
    per_step: list[list[float]] = []
    written = 0
    started = time.monotonic()
    for step in range(a.steps):
        time.sleep(max(0.0, started + a.seconds * step / a.steps - time.monotonic()))
        slowest = 0.0
        for k in range(a.metrics):
            t0 = time.perf_counter()
            reporter.metric(f"m{k}", k * 1000 + step / 2, step)
            calls.append(time.perf_counter() - t0)
            slowest = max(slowest, calls[-1])
        if (step + 1) % a.ack_every == 0 or step + 1 == a.steps:
            t0 = time.perf_counter()
            reporter.flush()
            calls.append(time.perf_counter() - t0)
            slowest = max(slowest, calls[-1])
            fresh, written = recorder.events[written:], len(recorder.events)
            _append_synced(
                a.out / "points.jsonl",
                [json.dumps([e.name, e.step, e.timestamp_ms, e.value]) + "\n" for e in fresh],
            )
            _append_synced(a.out / "acked", [f"{written}\n"])
            print(json.dumps({"acked": written}), flush=True)
        per_step.append([time.time(), slowest])
    report_s = time.monotonic() - started
    (a.out / "latency.json").write_text(json.dumps(per_step))

    run.end("FINISHED")
    t0 = time.monotonic()
    drained = drainer.flush(run.local_id, timeout_s=a.flush_timeout)
    drain_wait_s = time.monotonic() - t0
    drained_at = time.time()
    drainer.stop()
    ids = run.ids()
    summary = {
        "local_id": ids.local_id,
        "run_id": ids.run_id,
        "drained": drained,
        "points": written,
        "report_s": round(report_s, 3),
        "drain_wait_s": round(drain_wait_s, 3),
        "drained_at": drained_at,
        "call_median_s": statistics.median(calls),
        "call_max_s": max(calls),
        "left_in_spool": spool.pending_count(run.local_id),
    }
    print(json.dumps(summary), flush=True)
    return 0 if drained else 3


if __name__ == "__main__":
    sys.exit(main())
