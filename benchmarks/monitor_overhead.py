"""What the live monitor costs and how fresh it is (issue 4).

(a) Step time of a single-process torch loop without a monitor (A) and with engage's
    monitor (B: each step's events through Reporter -> FanOut([MonitorSink]), the HTTP
    endpoint up and GET by a separate process every second). A and B blocks alternate in
    one process, in ABBA order, so drift of the machine hits both alike.
(b) Freshness: from a report call to the value on /metrics (polled every 5 ms), on the
    direct path (Reporter -> sink) and on a job's real path (a Ray actor's Reporter ->
    EventHub -> the driver's EventPump every 0.25 s -> sink).
(c) Scrape cost of one endpoint holding 100 jobs' series: exposition size, scrape latency
    and the serving process's CPU per scrape.

    python benchmarks/monitor_overhead.py [--rounds 10] [--steps 300] [--no-ray]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import torch
from _monitor_load import (
    Mlp,
    cpu_seconds,
    many_jobs,
    median,
    pct,
    start_scraper,
    train_block,
)
from _report import git_commit, machine, write_section
from prometheus_client import generate_latest, start_http_server

from engage.events import FanOut, Reporter
from engage.monitor.exporter import MonitorSink

_LOSS = re.compile(r'^engage_loss\{[^}]*split="train"[^}]*\} (\S+)$', re.M)


# -- (a) overhead ----------------------------------------------------------------------------------
def overhead(rounds: int, steps: int, home: Path) -> dict[str, float]:
    torch.set_num_threads(1)
    model = Mlp()
    train_block(model, steps, None)  # warm-up
    sink = MonitorSink("bench", "overhead", home)
    url = sink.start().url
    scraper = start_scraper(url, 1.0)
    reporter = Reporter(FanOut([sink]), {"rank": "0"})  # as a training worker reports
    times: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for r in range(rounds):
            for arm in "AB" if r % 2 == 0 else "BA":
                times[arm] += train_block(model, steps, reporter if arm == "B" else None)
        reporter.flush()
    finally:
        scraper.terminate()
        scrapes = scraper.stdout.read().split()
        scraper.wait()
        sink.stop()
    a, b = times["A"], times["B"]
    return {
        "a_median_ms": 1000 * median(a),
        "b_median_ms": 1000 * median(b),
        "a_mean_ms": 1000 * sum(a) / len(a),
        "b_mean_ms": 1000 * sum(b) / len(b),
        "steps": len(a),
        "scrapes": int(scrapes[-1]) if scrapes else 0,
    }


# -- (b) freshness ---------------------------------------------------------------------------------
class Poller:
    """GETs /metrics every ``every_s`` and notes when each train-loss value first shows."""

    def __init__(self, url: str, every_s: float = 0.005) -> None:
        self.url, self.every_s = url, every_s
        self.seen: dict[float, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            with urllib.request.urlopen(self.url, timeout=5) as r:
                text = r.read().decode()
            now = time.time()
            for value in _LOSS.findall(text):
                self.seen.setdefault(float(value), now)


def report_values(reporter: Reporter, n: int, step_s: float) -> dict[float, float]:
    """A loop of ``step_s`` steps that reports step events, and a new train loss every 10th
    step; returns {loss value: when it was reported}."""
    reported = {}
    for step in range(n * 10):
        time.sleep(step_s)
        reporter.metrics({"step_seconds": step_s, "samples": 64.0}, step=step)
        if step % 10 == 9:
            value = 1.0 + step / 1e6
            reported[value] = time.time()
            reporter.metric("train_loss", value, step=step)
    reporter.flush()
    return reported


def latencies(reported: dict[float, float], seen: dict[float, float]) -> list[float]:
    """Per reported value: the time until /metrics showed it or a later value (a value
    replaced within one Reporter batch is never exposed itself, only its successor)."""
    if max(reported) not in seen:
        raise RuntimeError("the last reported value never showed on /metrics")
    out, first_seen = [], float("inf")
    for value in sorted(reported, reverse=True):  # values grow with time
        first_seen = min(first_seen, seen.get(value, float("inf")))
        out.append(first_seen - reported[value])
    return out


def freshness_direct(home: Path, n: int, step_s: float) -> list[float]:
    sink = MonitorSink("bench", "fresh-direct", home)
    with Poller(sink.start().url) as poller:
        reported = report_values(Reporter(FanOut([sink]), {"rank": "0"}), n, step_s)
        time.sleep(0.5)
    sink.stop()
    return latencies(reported, poller.seen)


def freshness_ray(home: Path, n: int, step_s: float) -> list[float]:
    import ray

    from engage.events import EventPump, HubTransport, start_hub
    from engage.train.trainer import _POLL_S

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote(num_cpus=1)
        def worker(hub, n: int, step_s: float) -> dict[float, float]:
            return report_values(Reporter(HubTransport(hub), {"rank": "0"}), n, step_s)

        hub = start_hub()
        sink = MonitorSink("bench", "fresh-ray", home)
        pump = EventPump(hub, FanOut([sink]))
        with Poller(sink.start().url) as poller:
            ref = worker.remote(hub, n, step_s)
            while not ray.wait([ref], timeout=_POLL_S)[0]:
                pump.poll()
            pump.finish()
            time.sleep(0.5)
        sink.stop()
        return latencies(ray.get(ref), poller.seen)
    finally:
        ray.shutdown()


# -- (c) scrape cost -------------------------------------------------------------------------------
def _scrapes(registry, scrapes: int) -> dict[str, float]:
    """Serve ``registry`` and GET it ``scrapes`` times in a row."""
    server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    took = []
    cpu0 = cpu_seconds()
    for _ in range(scrapes):  # the client's share is small next to rendering the exposition
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
        took.append(time.perf_counter() - t0)
    cpu = (cpu_seconds() - cpu0) / scrapes
    server.shutdown()
    server.server_close()
    return {
        "bytes": len(generate_latest(registry)),
        "series": sum(len(f.samples) for f in registry.collect()),
        "p50_ms": 1000 * pct(took, 0.5),
        "p99_ms": 1000 * pct(took, 0.99),
        "cpu_ms": 1000 * cpu,
    }


def scrape_cost(jobs: int, scrapes: int) -> tuple[dict[str, float], dict[str, float]]:
    """(one endpoint with ``jobs`` jobs' series, one job's endpoint: the baseline)."""
    return _scrapes(many_jobs(jobs), scrapes), _scrapes(many_jobs(1), scrapes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--values", type=int, default=200, help="freshness samples per path")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray path of (b)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        a = overhead(args.rounds, args.steps, home)
        print("overhead", a)
        direct = freshness_direct(home, args.values, 0.02)
        print("freshness direct p50/p99", pct(direct, 0.5), pct(direct, 0.99))
        via_ray = [] if args.no_ray else freshness_ray(home, args.values, 0.02)
        if via_ray:
            print("freshness ray p50/p99", pct(via_ray, 0.5), pct(via_ray, 0.99))
    c, one = scrape_cost(args.jobs, args.scrapes)
    print("scrape", c, one)
    command = (
        f"python benchmarks/monitor_overhead.py --rounds {args.rounds} --steps {args.steps} "
        f"--values {args.values} --jobs {args.jobs} --scrapes {args.scrapes}"
        + (" --no-ray" if args.no_ray else "")
    )
    write_section("monitor", render(a, direct, via_ray, c, one, args, command))


def render(a, direct, via_ray, c, one, args, command) -> str:
    ratio_med = a["b_median_ms"] / a["a_median_ms"]
    ratio_mean = a["b_mean_ms"] / a["a_mean_ms"]
    ray_rows = (
        f"| job path (Ray actor -> EventHub -> EventPump every 0.25 s -> sink) | "
        f"{1000 * pct(via_ray, 0.5):.0f} ms | {1000 * pct(via_ray, 0.99):.0f} ms | "
        f"{1000 * max(via_ray):.0f} ms |"
        if via_ray
        else "| job path (Ray) | not run (--no-ray) | | |"
    )
    worst = max(pct(direct, 0.99), pct(via_ray, 0.99) if via_ray else 0.0)
    return f"""## Live monitor: overhead, freshness, scrape cost (issue 4)

Machine: {machine()}. Commit {git_commit()}. Command: `{command}`.
The machine was shared with other work while this ran (2 cores): the A/B interleaving
below keeps the comparison fair; absolute times are noisy.

### (a) Monitoring overhead on training step time

A single-process torch loop (64-256-256-1 MLP, batch 256, 1 thread). Arm A: no monitor.
Arm B: every step reports engage's per-step events (step/data-wait/compute seconds,
samples) and every 50 steps epoch and train loss, through `Reporter -> FanOut([MonitorSink])`,
with the endpoint up and scraped every 1 s by another process ({a["scrapes"]} scrapes).
{args.rounds} rounds × {args.steps} steps per arm, ABBA order, in one process.

| arm | median step | mean step |
| --- | --- | --- |
| A, no monitor (baseline) | {a["a_median_ms"]:.3f} ms | {a["a_mean_ms"]:.3f} ms |
| B, monitor + scraped endpoint | {a["b_median_ms"]:.3f} ms | {a["b_mean_ms"]:.3f} ms |
| **ratio B / A** | **{ratio_med:.3f}** ({100 * (ratio_med - 1):+.1f}%) | {ratio_mean:.3f} ({100 * (ratio_mean - 1):+.1f}%) |

Absolute cost: {1000 * (a["b_median_ms"] - a["a_median_ms"]):.0f} µs per step (median B − A).
Target ≤ 1%: {"met" if ratio_med <= 1.01 else "NOT met"} (median) for this {a["a_median_ms"]:.1f} ms step.
The monitor's cost is per step, not per second of compute: about 5 µs to build the step's
four events in the Reporter plus ~20 µs for `JobMetrics.observe` to apply them (measured in
isolation), so it stays under 1% for steps of ~3 ms and more (the quickstart's steps take
tens of ms), and a step this small on a shared 2-core machine also pays for the endpoint's
thread and the scraper. It is also an upper bound for a real job: there a worker only
buffers events and pushes them to the EventHub actor; `JobMetrics.observe` and the HTTP
server run on the driver, not on the training workers.

### (b) Freshness: a reported value on /metrics

{args.values} train-loss values per path, a new one every 10 steps of 20 ms; /metrics polled
every 5 ms. A value counts as visible when /metrics shows it or a later value (the
Reporter batches, so a loss replaced within one batch is only exposed as its successor).

| path | p50 | p99 | max |
| --- | --- | --- | --- |
| direct (Reporter -> MonitorSink) | {1000 * pct(direct, 0.5):.0f} ms | {1000 * pct(direct, 0.99):.0f} ms | {1000 * max(direct):.0f} ms |
{ray_rows}

Target: visible within 1 s → {"met" if worst <= 1.0 else "NOT met"} (p99). The Reporter
sends its buffer when an event arrives more than 0.5 s after the oldest buffered one
(or at 256 events), so the direct path's latency is at most ~0.5 s plus one step; the job
path adds the driver's pump interval (0.25 s) and an actor call.

### (c) Scrape cost of one endpoint with {args.jobs} jobs' series

{args.jobs} jobs' `JobMetrics` (2 workers each, every family populated) served as one set of
families by one `prometheus_client` HTTP endpoint; {args.scrapes} sequential scrapes.

| figure | {args.jobs} jobs on one endpoint | baseline: one job's endpoint | ratio |
| --- | --- | --- | --- |
| series | {c["series"]:,} | {one["series"]} | {c["series"] / one["series"]:.0f}× |
| exposition size | {c["bytes"] / 1024:,.0f} KiB | {one["bytes"] / 1024:.1f} KiB | {c["bytes"] / one["bytes"]:.0f}× |
| scrape latency p50 | {c["p50_ms"]:.1f} ms | {one["p50_ms"]:.2f} ms | {c["p50_ms"] / one["p50_ms"]:.0f}× |
| scrape latency p99 | {c["p99_ms"]:.1f} ms | {one["p99_ms"]:.2f} ms | {c["p99_ms"] / one["p99_ms"]:.0f}× |
| CPU per scrape (server and client, one process) | {c["cpu_ms"]:.1f} ms | {one["cpu_ms"]:.2f} ms | {c["cpu_ms"] / one["cpu_ms"]:.0f}× |

At a 15 s scrape interval that is {100 * c["cpu_ms"] / 15000:.2f}% of one core for {args.jobs}
jobs; at 1 s, {100 * c["cpu_ms"] / 1000:.1f}%. In engage each job serves only its own series
(one endpoint per job, ~{one["bytes"] / 1024:.0f} KiB), so this is the cost of a
hypothetical aggregating endpoint, not of any one job.
"""


if __name__ == "__main__":
    main()
