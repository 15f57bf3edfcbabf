"""Step time of a small torch training loop without logging (A) and with engage reporting."""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from engage.events import FanOut, Reporter
from engage.tracking import Drainer, PipelineRun, Spool
from engage.tracking.sinks import MetricSink

METRICS_PER_STEP = 10


class Mlp:
    """A 64-256-256-1 MLP on one fixed random batch: a few milliseconds per step on one thread."""

    def __init__(self, seed: int = 0, batch: int = 256, width: int = 256) -> None:
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1),
        )
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.x = torch.randn(batch, 64)
        self.y = torch.randn(batch, 1)
        self.ema = 0.0

    def step(self) -> dict[str, float]:
        """One optimiser step; returns the step's 10 metric values (computed in A and B alike)."""
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        value = loss.item()
        self.ema = 0.9 * self.ema + 0.1 * value
        base = {"train_loss": value, "train_loss_ema": self.ema, "lr": 1e-3}
        return {**base, **{f"train_aux_{k}": value * k for k in range(METRICS_PER_STEP - 3)}}


ARMS = {
    "A": "no logging",
    "S": "engage report -> spool, no drainer running",
    "B": "engage report -> spool, drainer process at nice 19 sending to MLflow (a real job)",
    "T": "as B, but the drainer a thread of the training process (before issue 11)",
}


class _Arm:
    """What one arm runs around the training loop: a reporter, and a drainer process or thread.

    B's drainer process is started once and lives through every round, as in a job: a
    process started per round would spend its start-up (importing MLflow) inside the
    round's steps, and :meth:`Drainer.flush` on a process drainer swaps in a fresh one.
    Each round is a new run; it is in MLflow before the clock starts, and fully drained
    before the next arm's round, so no drain work spills into another arm.
    """

    def __init__(self, name: str, home: Path, uri: str) -> None:
        self.name = name
        self.home, self.uri = home, uri
        self.spool = Spool(home / f"train-{name}.db") if name != "A" else None
        self.drainer_cpu_s = 0.0  # CPU the drainer spent on this arm's rounds
        self.drainer_cpu_in_steps_s = 0.0  # ... of which while the timed steps ran
        self._cpu_at_begin = 0.0
        self._process = Drainer(self.spool.path).start() if name == "B" else None

    def begin(self) -> tuple[Reporter | None, Any]:
        if self.spool is None:
            return None, None
        run = PipelineRun.start(
            self.spool, self.uri, "tracking-bench", f"train-{self.name}", {}, self.home
        )
        drainer = self._process
        if self.name == "T":
            drainer = Drainer(self.spool.path, in_process=True).start()
        if drainer is not None:
            _drained(drainer, run.local_id)  # the run is in MLflow before the clock
            self._cpu_at_begin = _drainer_cpu(drainer)
        return Reporter(FanOut([MetricSink(run)])), (run, drainer)

    def end(self, reporter: Reporter | None, state: Any) -> None:
        if reporter is None:
            return
        run, drainer = state
        if drainer is not None:
            self.drainer_cpu_in_steps_s += _drainer_cpu(drainer) - self._cpu_at_begin
        reporter.flush()
        run.end("FINISHED")
        if drainer is not None:  # nothing of this round spills into the next one
            _drained(drainer, run.local_id)
            self.drainer_cpu_s += _drainer_cpu(drainer) - self._cpu_at_begin
            if drainer is not self._process:
                drainer.stop()

    def close(self) -> None:
        if self._process is not None:
            self._process.stop()
        elif self.spool is not None:
            self.spool.close()


def _drained(drainer: Drainer, run_id: str, timeout_s: float = 120.0) -> None:
    """Wait until the drainer (left where it runs) has sent everything of ``run_id``."""
    deadline = time.monotonic() + timeout_s
    drainer.wake()
    while not drainer.is_drained(run_id):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {run_id} run was not drained in {timeout_s:.0f} s")
        time.sleep(0.02)


def _drainer_cpu(drainer: Drainer) -> float:
    """CPU seconds so far of the drainer: its process (B) or its thread (T)."""
    if drainer.pid is not None:
        times = psutil.Process(drainer.pid).cpu_times()
        return times.user + times.system
    return time.clock_gettime(time.pthread_getcpuclockid(drainer._thread.ident))


def _repetition(mlp: Mlp, steps: int, arm: _Arm) -> dict[str, Any]:
    """One repetition of an arm: each step's wall time, the training process's CPU time
    and the training thread's.

    The process CPU clock counts every thread of this process (the training thread, the
    Reporter's background spool writer, T's drainer thread) and nothing of other processes,
    so other load on the machine does not inflate it. ``cpu_s`` runs from the first step to
    the end of the Reporter's final flush, so the last batch's spool write is counted too.
    """
    reporter, state = arm.begin()
    clock, cpu, thread_cpu = time.perf_counter, time.process_time, time.thread_time
    times = [0.0] * steps
    cpu0, thread0 = cpu(), thread_cpu()
    for i in range(steps):
        t0 = clock()
        values = mlp.step()
        if reporter is not None:
            reporter.metrics(values, step=i)
        times[i] = clock() - t0
    if reporter is not None:
        reporter.flush()
    cpu_s, thread_s = cpu() - cpu0, thread_cpu() - thread0
    arm.end(reporter, state)
    return {"times": times, "cpu_s": cpu_s, "thread_s": thread_s}


def training_overhead(home: Path, uri: str, steps: int, reps: int) -> dict:
    """Step wall time and process CPU time per arm over ``reps`` short interleaved rounds.

    Every round runs each arm once, the arms' order rotating, so a change in the machine's
    load hits every arm alike; the overheads against A are paired by round and their 95%
    confidence intervals bootstrapped over rounds (:func:`_bootstrap`).
    """
    torch.set_num_threads(1)
    mlp = Mlp()
    arms = {name: _Arm(name, home, uri) for name in ARMS}
    _repetition(mlp, max(steps // 4, 50), arms["A"])  # warm-up
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in ARMS}
    try:
        for r in range(reps):
            order = list(ARMS)[r % 4 :] + list(ARMS)[: r % 4]
            for name in order:
                rounds[name].append(_repetition(mlp, steps, arms[name]))
            if (r + 1) % max(reps // 8, 1) == 0 or r + 1 == reps:
                print(
                    f"training round {r + 1}/{reps}: "
                    + ", ".join(
                        f"{n} {statistics.median(x[-1]['times']) * 1e3:.3f} ms"
                        for n, x in rounds.items()
                    )
                    + f" (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    finally:
        for arm in arms.values():
            arm.close()
    points = reps * steps * METRICS_PER_STEP
    return {
        "steps": steps,
        "reps": reps,
        "arms": {
            name: {
                **_arm_figures(rounds[name], rounds["A"], steps),
                "drainer_cpu_us_per_point": arms[name].drainer_cpu_s / points * 1e6,
                "drainer_cpu_us_per_step": arms[name].drainer_cpu_in_steps_s / (reps * steps) * 1e6,
            }
            for name in ARMS
        },
    }


def _arm_figures(arm: list[dict[str, Any]], base: list[dict[str, Any]], steps: int) -> dict:
    """One arm's step figures against A, with bootstrap CIs of the paired overheads."""
    t = [x for rep in arm for x in rep["times"]]
    a = [x for rep in base for x in rep["times"]]
    wall = _bootstrap(
        [rep["times"] for rep in arm],
        [rep["times"] for rep in base],
        lambda b, a: float(np.median(b) / np.median(a) - 1),
    )
    cpu_us = [[rep["cpu_s"] / steps * 1e6] for rep in arm]
    base_cpu_us = [[rep["cpu_s"] / steps * 1e6] for rep in base]
    cpu = _bootstrap(cpu_us, base_cpu_us, lambda b, a: float(np.mean(b) - np.mean(a)))
    thread_extra_us = (
        (
            statistics.fmean(rep["thread_s"] for rep in arm)
            - statistics.fmean(rep["thread_s"] for rep in base)
        )
        / steps
        * 1e6
    )
    return {
        "median_ms": statistics.median(t) * 1e3,
        "mean_ms": statistics.fmean(t) * 1e3,
        "p99_ms": sorted(t)[int(0.99 * len(t))] * 1e3,
        "overhead_median": wall["estimate"],
        "overhead_median_ci": wall["ci"],
        "overhead_mean": statistics.fmean(t) / statistics.fmean(a) - 1,
        "extra_us_per_step": (statistics.fmean(t) - statistics.fmean(a)) * 1e6,
        "cpu_us_per_step": statistics.fmean(c for (c,) in cpu_us),
        "extra_cpu_us_per_step": cpu["estimate"],
        "extra_cpu_us_ci": cpu["ci"],
        "extra_thread_cpu_us_per_step": thread_extra_us,
    }


BOOTSTRAP_RESAMPLES = 4000


def _bootstrap(arm: list[list[float]], base: list[list[float]], stat, seed: int = 0) -> dict:
    """``stat(arm values, base values)`` over all rounds, and its 95% percentile bootstrap CI.

    Rounds are resampled with replacement, each keeping its arm and base repetitions
    together (they ran side by side, under the same load), so the interval reflects how
    much the overhead varies from round to round rather than step to step.
    """
    rng = np.random.default_rng(seed)
    arm_a = [np.asarray(r) for r in arm]
    base_a = [np.asarray(r) for r in base]
    estimate = stat(np.concatenate(arm_a), np.concatenate(base_a))
    draws = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        pick = rng.integers(0, len(arm_a), len(arm_a))
        draws.append(
            stat(
                np.concatenate([arm_a[i] for i in pick]), np.concatenate([base_a[i] for i in pick])
            )
        )
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"estimate": estimate, "ci": (float(low), float(high))}


def reporting_cpu(home: Path, uri: str, steps: int = 2000, runs: int = 5) -> dict[str, float]:
    """CPU per training step of the reporting path alone, its two parts measured apart.

    The training thread's part: ``Reporter.metrics`` of 10 points, the batches handed to a
    transport that drops them. The spool writer's part (the Reporter's background thread
    in the benchmark's layout, the driver in a Ray job): MetricSink into the spool, one
    synced transaction per 256-point batch, per 10 points. Each is the minimum over
    ``runs`` runs: other load on the machine only ever adds to a run's CPU time (evicted
    caches, a shared core), so the least-disturbed run is the closest to the cost itself.
    """

    class _Drop:
        def send(self, events: list, wait: bool = False) -> None:
            """Drop the batch (the reporter's own cost is measured)."""

    values = {f"m{k}": 0.1 * k for k in range(METRICS_PER_STEP)}
    reporter = Reporter(_Drop())
    call_us = []
    for _ in range(runs):
        cpu0 = time.process_time()
        for i in range(steps):
            reporter.metrics(values, step=i)
        reporter.flush()
        call_us.append((time.process_time() - cpu0) / steps * 1e6)
    spool = Spool(home / "reporting-cpu.db")
    run = PipelineRun.start(spool, uri, "tracking-bench", "reporting-cpu", {}, home)
    old = _OneRowPerPoint(home / "reporting-cpu-rows.db")
    collect = _Collect()
    feeder = Reporter(collect, max_batch=256, max_age_s=3600)
    for i in range(runs * steps):
        feeder.metrics(values, step=i)
    feeder.flush()
    per_run = len(collect.batches) // runs
    write_us: dict[str, list[float]] = {"writer_us": [], "writer_rows_us": []}
    for r in range(runs):
        todo = collect.batches[r * per_run : (r + 1) * per_run]
        points = sum(len(b) for b in todo)
        # The spool's batch rows and the one-row-per-point layout before them, alternated.
        for name, sink in (("writer_us", MetricSink(run)), ("writer_rows_us", MetricSink(old))):
            cpu0 = time.process_time()
            for events in todo:
                sink.emit(events)
            write_us[name].append((time.process_time() - cpu0) / points * METRICS_PER_STEP * 1e6)
    spool.close()
    old.close()
    return {
        "reporter_us": min(call_us),
        **{name: min(us) for name, us in write_us.items()},
        **_push_cpu(collect.batches[:per_run], runs),
    }


class _OneRowPerPoint:
    """The baseline: the spool's write as it was before batch rows, one outbox row per
    point in one synced transaction per batch (the same SQLite settings and index)."""

    def __init__(self, path: Path) -> None:
        import sqlite3

        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(
            "CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
            " run TEXT NOT NULL, kind TEXT NOT NULL, key TEXT, num REAL, text TEXT,"
            " step INTEGER, ts INTEGER NOT NULL, sent INTEGER NOT NULL DEFAULT 0, result TEXT);"
            "CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(sent, run, seq);"
        )

    def log_metric_events(self, events: list) -> None:
        """PipelineRun.log_metric_events and Spool.append_points as they were."""
        points = [
            ("metric", e.name, e.value, e.step or 0, e.timestamp_ms)
            for e in events
            if e.kind == "metric" and e.value is not None
        ]
        rows = []
        for kind, key, value, step, ts in points:
            value = float(value)
            num, text = (value, None) if math.isfinite(value) else (None, str(value))
            rows.append(("r", kind, key, num, text, step, ts))
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany(
            "INSERT INTO outbox (run, kind, key, num, text, step, ts) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


def _push_cpu(batches: list[list], runs: int) -> dict[str, float]:
    """CPU per 10 points of serialising a worker's batches for the hub, as Ray does
    (cloudpickle): as rows (what HubTransport sends since issue 11) and as Event objects
    (before). Ray's task submission itself is not included."""
    import ray.cloudpickle as cloudpickle

    from engage.events import _to_rows

    points = sum(len(b) for b in batches)
    out = {}
    for name, encode in (("push_us", _to_rows), ("push_events_us", list)):
        best = math.inf
        for _ in range(runs):
            cpu0 = time.process_time()
            for events in batches:
                cloudpickle.dumps(encode(events))
            best = min(best, time.process_time() - cpu0)
        out[name] = best / points * METRICS_PER_STEP * 1e6
    return out


class _Collect:
    """A transport that keeps the batches (built ahead, so their creation is not timed)."""

    def __init__(self) -> None:
        self.batches: list[list] = []

    def send(self, events: list, wait: bool = False) -> None:
        """Keep the batch."""
        self.batches.append(events)
