"""Latency per logging call on the calling thread: engage's Reporter vs MLflow sync and async."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from engage.events import FanOut, Reporter
from engage.tracking import Drainer, PipelineRun, Spool, ensure_experiment, open_client
from engage.tracking.sinks import MetricSink

NAMES = [f"bench_metric_{k}" for k in range(10)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_calls(call: Callable[[str, float, int], object], n: int, first_step: int) -> list[float]:
    """Seconds each of ``n`` calls took: 10 metric names in turn, a new step every 10 calls."""
    clock = time.perf_counter
    out = [0.0] * n
    for i in range(n):
        t0 = clock()
        call(NAMES[i % 10], i * 1e-3, first_step + i // 10)
        out[i] = clock() - t0
    return out


class LatencyBench:
    """Three ways to log a metric into one SQLite MLflow store, each into its own run."""

    def __init__(self, home: Path, uri: str) -> None:
        self.client = open_client(uri)
        experiment = ensure_experiment(self.client, "tracking-bench")
        self.sync_run = self.client.create_run(experiment, run_name="mlflow-sync").info.run_id
        self.async_run = self.client.create_run(experiment, run_name="mlflow-async").info.run_id
        self.spool = Spool(home / "spool.db")
        self.run = PipelineRun.start(self.spool, uri, "tracking-bench", "engage-latency", {}, home)
        self.reporter = Reporter(FanOut([MetricSink(self.run)]))
        self.async_backlog_s = 0.0

    def engage(self, n: int, step: int) -> list[float]:
        """Reporter.metric into the spool sink, with the drainer running as in a job."""
        drainer = Drainer(self.spool.path).start()
        drainer.flush(self.run.local_id)  # the run exists in MLflow before timing starts
        out = time_calls(self.reporter.metric, n, step)
        self.reporter.flush()
        drainer.flush(self.run.local_id, timeout_s=120)
        drainer.stop()
        return out

    def mlflow_sync(self, n: int, step: int) -> list[float]:
        log, run = self.client.log_metric, self.sync_run
        return time_calls(lambda k, v, s: log(run, k, v, step=s, synchronous=True), n, step)

    def mlflow_async(self, n: int, step: int) -> list[float]:
        log, run = self.client.log_metric, self.async_run
        out = time_calls(lambda k, v, s: log(run, k, v, step=s, synchronous=False), n, step)
        t0 = time.perf_counter()
        # The queue lives on the client's store; emptying it keeps it out of the next timing.
        self.client._tracking_client.store.flush_async_logging()
        self.async_backlog_s += time.perf_counter() - t0
        return out

    def landed(self) -> dict[str, int]:
        """Points each way has in MLflow (the engage run's id is the server's once drained)."""
        runs = {"engage": self.run.run_id, "mlflow sync": self.sync_run}
        runs["mlflow async"] = self.async_run
        return {
            name: sum(len(self.client.get_metric_history(run, k)) for k in NAMES)
            for name, run in runs.items()
        }


def latency(
    home: Path, uri: str, calls: int, sync_calls: int, async_calls: int, rounds: int
) -> dict[str, dict]:
    """Median, p99 and mean µs per call of each way, interleaved in ``rounds`` rounds."""
    bench = LatencyBench(home, uri)
    ways = {
        "engage": (bench.engage, calls),
        "mlflow sync": (bench.mlflow_sync, sync_calls),
        "mlflow async": (bench.mlflow_async, async_calls),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(rounds):
        for name in list(ways) if r % 2 == 0 else list(reversed(ways)):
            way, n = ways[name]
            times[name] += way(n // rounds, r * n // 10)
        print(f"latency round {r + 1}/{rounds} (load {os.getloadavg()[0]:.1f})")
    landed = bench.landed()
    bench.spool.close()
    out = {}
    for name, t in times.items():
        us = [v * 1e6 for v in t]
        out[name] = {
            "n": len(us),
            "landed": landed[name],
            "median": statistics.median(us),
            "p99": pct(us, 0.99),
            "mean": statistics.fmean(us),
        }
    # MLflow's queue sends each call as its own log_batch unless
    # MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS is set: how fast did its backlog land?
    out["mlflow async"]["backlog_pps"] = async_calls / bench.async_backlog_s
    return out
