"""Helpers for benchmarks/monitor_overhead.py: a training loop, a scraper, many jobs' series."""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable

import torch
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from engage.events import Event, Reporter
from engage.monitor.metrics import JobMetrics


class Mlp:
    """A 64-256-256-1 MLP on one fixed batch: a few milliseconds per step on one thread."""

    def __init__(self, batch: int = 256, width: int = 256) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 1),
        )
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.x, self.y = torch.randn(batch, 64), torch.randn(batch, 1)

    def step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss.item()


def train_block(model: Mlp, steps: int, reporter: Reporter | None) -> list[float]:
    """``steps`` steps; with a reporter, each reports what engage's loop reports per step.

    Returns each step's wall time (the report calls included)."""
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        t1 = time.perf_counter()  # no data loading here: the batch is fixed
        loss = model.step()
        t2 = time.perf_counter()
        if reporter is not None:
            reporter.metrics(
                {
                    "step_seconds": t2 - t0,
                    "data_wait_seconds": t1 - t0,
                    "compute_seconds": t2 - t1,
                    "samples": 256,
                },
                step=step,
            )
            if step % 50 == 49:  # an "epoch": the loop's per-epoch metrics
                reporter.metrics({"epoch": step // 50, "train_loss": loss}, step=step)
        times.append(time.perf_counter() - t0)
    return times


SCRAPER = """
import sys, time, urllib.request
url, every, n = sys.argv[1], float(sys.argv[2]), 0
while True:
    t0 = time.perf_counter()
    try:
        urllib.request.urlopen(url, timeout=5).read()
        n += 1
    except OSError:
        pass
    print(n, flush=True)
    time.sleep(max(0.0, every - (time.perf_counter() - t0)))
"""


def start_scraper(url: str, every_s: float = 1.0) -> subprocess.Popen:
    """A separate process that GETs ``url`` every ``every_s`` (as Prometheus would)."""
    return subprocess.Popen(
        [sys.executable, "-c", SCRAPER, url, str(every_s)], stdout=subprocess.PIPE, text=True
    )


# -- many jobs on one endpoint -------------------------------------------------------------------
def realistic_events(world: int = 2, steps: int = 20) -> list[Event]:
    """A job a few epochs in: every family of JobMetrics has its samples."""
    events = [
        Event("lifecycle", "stage", data={"stage": "train"}),
        Event("lifecycle", "train_start", labels={"rank": "0"}, data={"world_size": world}),
    ]
    for rank in map(str, range(world)):
        worker = {"rank": rank}
        for _ in range(steps):
            events += [
                Event("metric", "data_wait_seconds", 0.012, labels=worker),
                Event("metric", "compute_seconds", 0.041, labels=worker),
                Event("metric", "step_seconds", 0.053, labels=worker),
                Event("metric", "samples", 64.0, labels=worker),
            ]
        events += [
            Event("metric", "worker_cpu_seconds", 3.2, labels=worker),
            Event("metric", "worker_resident_memory_bytes", 5.1e8, labels=worker),
        ]
    for name, value in [("train_loss", 0.71), ("val_loss", 0.8), ("val_accuracy", 0.62)]:
        events.append(Event("metric", name, value))
    events += [Event("metric", "samples_per_second", 1210.0), Event("metric", "epoch", 3.0)]
    events.append(Event("lifecycle", "alert", data={"rule": "EngageDataBound", "state": "firing"}))
    return events


class MergedJobs(Collector):
    """Many jobs' JobMetrics (one registry each) exposed as one set of families: what one
    endpoint serving every job's series would expose."""

    def __init__(self, registries: Iterable[CollectorRegistry]) -> None:
        self.registries = list(registries)

    def collect(self):
        merged = {}
        for registry in self.registries:
            for family in registry.collect():
                if family.name in merged:
                    merged[family.name].samples.extend(family.samples)
                else:
                    merged[family.name] = family
        return list(merged.values())


def many_jobs(n: int) -> CollectorRegistry:
    registries = []
    for i in range(n):
        registry = CollectorRegistry(auto_describe=True)
        metrics = JobMetrics(registry, f"job{i % 10}", f"{i:032x}")
        metrics.set_stall_threshold(120.0)
        metrics.observe(realistic_events())
        metrics.set_spool(3, 1.5)
        registries.append(registry)
    parent = CollectorRegistry(auto_describe=False)
    parent.register(MergedJobs(registries))
    return parent


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values)
