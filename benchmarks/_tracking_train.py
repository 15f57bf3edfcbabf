"""Step time of a small torch training loop without logging (A) and with engage reporting."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

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
    """What one arm runs around the training loop: a reporter, and a drainer process or thread."""

    def __init__(self, name: str, home: Path, uri: str) -> None:
        self.name = name
        self.home, self.uri = home, uri
        self.spool = Spool(home / f"train-{name}.db") if name != "A" else None
        self.drainer_cpu_s = 0.0  # CPU the drainer spent on this arm's repetitions
        self.drainer_cpu_in_steps_s = 0.0  # ... of which while the timed steps ran
        self._cpu_at_begin = 0.0

    def begin(self) -> tuple[Reporter | None, Any]:
        if self.spool is None:
            return None, None
        run = PipelineRun.start(
            self.spool, self.uri, "tracking-bench", f"train-{self.name}", {}, self.home
        )
        drainer = None
        if self.name in ("B", "T"):
            drainer = Drainer(self.spool.path, in_process=self.name == "T").start()
            drainer.flush(run.local_id, timeout_s=120)  # the run is in MLflow before the clock
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
        if drainer is not None:  # nothing of this repetition spills into the next one
            drainer.flush(run.local_id, timeout_s=120)
            self.drainer_cpu_s += _drainer_cpu(drainer) - self._cpu_at_begin
            drainer.stop()

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()


def _drainer_cpu(drainer: Drainer) -> float:
    """CPU seconds so far of the drainer: its process (B) or its thread (T)."""
    if drainer.pid is not None:
        times = psutil.Process(drainer.pid).cpu_times()
        return times.user + times.system
    return time.clock_gettime(time.pthread_getcpuclockid(drainer._thread.ident))


def _repetition(mlp: Mlp, steps: int, arm: _Arm) -> list[float]:
    reporter, state = arm.begin()
    clock = time.perf_counter
    times = [0.0] * steps
    for i in range(steps):
        t0 = clock()
        values = mlp.step()
        if reporter is not None:
            reporter.metrics(values, step=i)
        times[i] = clock() - t0
    arm.end(reporter, state)
    return times


def training_overhead(home: Path, uri: str, steps: int, reps: int) -> dict:
    """Median and mean step time per arm; the arms' order rotates every repetition."""
    torch.set_num_threads(1)
    mlp = Mlp()
    arms = {name: _Arm(name, home, uri) for name in ARMS}
    _repetition(mlp, max(steps // 4, 50), arms["A"])  # warm-up
    times: dict[str, list[float]] = {name: [] for name in ARMS}
    try:
        for r in range(reps):
            order = list(ARMS)[r % 4 :] + list(ARMS)[: r % 4]
            for name in order:
                times[name] += _repetition(mlp, steps, arms[name])
            print(
                f"training rep {r + 1}/{reps}: "
                + ", ".join(
                    f"{n} {statistics.median(t[-steps:]) * 1e3:.3f} ms" for n, t in times.items()
                )
                + f" (load {os.getloadavg()[0]:.1f})"
            )
    finally:
        for arm in arms.values():
            arm.close()
    base = times["A"]
    points = reps * steps * METRICS_PER_STEP
    return {
        "steps": steps,
        "reps": reps,
        "arms": {
            name: {
                "median_ms": statistics.median(t) * 1e3,
                "mean_ms": statistics.fmean(t) * 1e3,
                "p99_ms": sorted(t)[int(0.99 * len(t))] * 1e3,
                "overhead_median": statistics.median(t) / statistics.median(base) - 1,
                "overhead_mean": statistics.fmean(t) / statistics.fmean(base) - 1,
                "extra_us_per_step": (statistics.fmean(t) - statistics.fmean(base)) * 1e6,
                "drainer_cpu_us_per_point": arms[name].drainer_cpu_s / points * 1e6,
                "drainer_cpu_us_per_step": arms[name].drainer_cpu_in_steps_s / (reps * steps) * 1e6,
            }
            for name, t in times.items()
        },
    }
