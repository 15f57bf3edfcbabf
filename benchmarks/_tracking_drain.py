"""Draining the spool to a local `mlflow server`: throughput, and an outage mid-stream."""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from _mlflow_server import LocalMlflowServer
from _tracking_latency import NAMES

from engage.events import FanOut, Reporter
from engage.tracking import Drainer, PipelineRun, Spool, ensure_experiment, open_client
from engage.tracking.sinks import MetricSink
from engage.tracking.spool import now_ms


def _engage_drain(home: Path, uri: str, points: int, tag: str) -> tuple[float, float]:
    """Seconds to drain ``points`` spooled points, and this process's CPU seconds for it."""
    spool = Spool(home / f"drain-{tag}.db")
    run = PipelineRun.start(spool, uri, "tracking-bench", f"drain-{tag}", {}, home)
    drainer = Drainer(spool.path)
    drainer.drain_once()  # creates the run; only the points are timed
    ts = now_ms()
    for start in range(0, points, 256):  # as the Reporter writes them: 256 per transaction
        chunk = range(start, min(start + 256, points))
        spool.append_points(
            run.local_id, [("metric", NAMES[i % 10], i * 1e-3, i // 10, ts) for i in chunk]
        )
    cpu, t0 = time.process_time(), time.perf_counter()
    status = drainer.drain_once()
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu
    left = spool.pending_count(run.local_id)
    drainer.stop()
    spool.close()
    if status.error or left:
        raise RuntimeError(f"drain incomplete: {left} left, {status.error}")
    return took, cpu


def _direct_log_batch(uri: str, points: int) -> tuple[float, float]:
    from mlflow.entities import Metric

    client = open_client(uri)
    run_id = client.create_run(ensure_experiment(client, "tracking-bench")).info.run_id
    ts = now_ms()
    metrics = [Metric(NAMES[i % 10], i * 1e-3, ts, i // 10) for i in range(points)]
    cpu, t0 = time.process_time(), time.perf_counter()
    for start in range(0, points, 1000):  # log_batch's limit of 1000 metrics per request
        client.log_batch(run_id, metrics=metrics[start : start + 1000], synchronous=True)
    return time.perf_counter() - t0, time.process_time() - cpu


def _compare(home: Path, uri: str, points: int, reps: int, tag: str) -> dict:
    """The drainer vs plain log_batch of the same points to ``uri``, order alternated."""
    runs: dict[str, list[tuple[float, float]]] = {"engage": [], "direct": []}
    _direct_log_batch(uri, 5000)  # warm-up: a fresh server's first requests are several× slower
    for r in range(reps):
        for which in ("engage", "direct") if r % 2 == 0 else ("direct", "engage"):
            if which == "engage":
                runs[which].append(_engage_drain(home, uri, points, f"{tag}-{r}"))
            else:
                runs[which].append(_direct_log_batch(uri, points))
        print(f"drain to {tag} rep {r + 1}/{reps} done (load {os.getloadavg()[0]:.1f})")
    out: dict[str, float] = {"points": points}
    for which, got in runs.items():
        out[f"{which}_pps"] = points / statistics.median(s for s, _ in got)
        out[f"{which}_cpu_us"] = statistics.median(c for _, c in got) / points * 1e6
    return out


def drain_throughput(home: Path, sqlite_uri: str, points: int, reps: int = 3) -> dict:
    """Drain throughput to the local SQLite store and to a local `mlflow server`."""
    local = _compare(home, sqlite_uri, points, reps, "sqlite")
    server = LocalMlflowServer(home / "server-throughput")
    server.root.mkdir()
    startup = server.start()
    try:
        remote = _compare(home, server.url, points, reps, "server")
    finally:
        server.stop()
    return {"sqlite": local, "server": remote, "server_startup_s": startup}


class _Watched:
    """An MlflowClient that says when a log_batch request is in flight (to kill mid-request)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.in_flight = threading.Event()
        self.failures: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def log_batch(self, *args: Any, **kwargs: Any) -> Any:
        self.in_flight.set()
        try:
            return self._client.log_batch(*args, **kwargs)
        except Exception as exc:
            self.failures.append(str(exc))
            raise
        finally:
            self.in_flight.clear()


class _Producer(threading.Thread):
    """A training loop stand-in: 10 metrics per step at a fixed rate through a Reporter."""

    def __init__(self, reporter: Reporter, period_s: float) -> None:
        super().__init__(daemon=True)
        self.reporter = reporter
        self.period_s = period_s
        self.step = 0
        self.calls: list[tuple[float, float]] = []  # (when, seconds the report call took)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.reporter.metrics({n: self.step * 1e-3 for n in NAMES}, step=self.step)
            self.calls.append((t0, time.perf_counter() - t0))
            self.step += 1
            time.sleep(self.period_s)


def _wait_in_flight(watched: _Watched, timeout_s: float = 10.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while not watched.in_flight.is_set() and time.perf_counter() < deadline:
        time.sleep(0.0005)


def _count_in_mlflow(url: str, run_id: str, steps: int, outage_steps: range) -> dict:
    client = open_client(url)
    rows, seen = 0, set()
    for name in NAMES:
        history = client.get_metric_history(run_id, name)
        rows += len(history)
        seen |= {(name, m.step) for m in history}
    return {
        "logged": steps * len(NAMES),
        "rows": rows,
        "distinct": len(seen),
        "duplicates": rows - len(seen),
        "missing": steps * len(NAMES) - len(seen),
        "outage_points": len(outage_steps) * len(NAMES),
        "recovered": sum(1 for _, s in seen if s in outage_steps),
    }


def outage(home: Path, outage_s: float, period_s: float = 0.01, steady_s: float = 3.0) -> dict:
    """Kill the server (SIGKILL) while a log_batch is in flight, restart it, count the points."""
    server = LocalMlflowServer(home / "server-outage")
    server.root.mkdir()
    server.start()
    watched: list[_Watched] = []
    warnings: list[str] = []

    def factory(uri: str) -> _Watched:
        watched.append(_Watched(open_client(uri)))
        return watched[-1]

    spool = Spool(home / "outage.db")
    run = PipelineRun.start(spool, server.url, "tracking-bench", "outage", {}, home)
    drainer = Drainer(spool.path, warn=warnings.append, client_factory=factory).start()
    drainer.flush(run.local_id)
    producer = _Producer(Reporter(FanOut([MetricSink(run)])), period_s)
    try:
        producer.start()
        time.sleep(steady_s)
        _wait_in_flight(watched[0])
        mid_request = watched[0].in_flight.is_set()
        server.kill()
        killed_at, kill_step = time.perf_counter(), producer.step
        time.sleep(outage_s)
        restart_s = server.start()
        back_at, back_step = time.perf_counter(), producer.step
        time.sleep(steady_s)
        producer.stop.set()
        producer.join()
        producer.reporter.flush()
        run.end("FINISHED")
        drained = drainer.flush(run.local_id, timeout_s=180)
        caught_up_s = time.perf_counter() - back_at
        counts = _count_in_mlflow(
            server.url, run.run_id, producer.step, range(kill_step, back_step)
        )
    finally:
        drainer.stop()
        spool.close()
        server.stop()
    during = [d for t, d in producer.calls if killed_at <= t < back_at]
    before = [d for t, d in producer.calls if t < killed_at]
    return {
        **counts,
        "drained": drained,
        # A request cut by the kill fails with a reset, not with "connection refused".
        "mid_request": mid_request,
        "first_failure": (watched[0].failures or ["none"])[0].splitlines()[0][:200],
        "down_s": back_at - killed_at,
        "restart_s": restart_s,
        "caught_up_s": caught_up_s,
        "rate_pps": len(NAMES) / period_s,
        "p99_before_us": _p99(before) * 1e6,
        "p99_during_us": _p99(during) * 1e6,
        "mean_before_us": statistics.fmean(before) * 1e6,
        "mean_during_us": statistics.fmean(during) * 1e6,
        "warnings": warnings,
    }


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")
