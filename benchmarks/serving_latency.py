"""Serving latency and throughput: `engage deploy` against `mlflow models serve` (issue 5).

One registered model (the quickstart's `smart-home-occupancy` version 1), served at the
same time by engage with 1 and with 2 replicas (dynamic batching on, the spec's
defaults), by engage with 1 replica and the monitoring hooks off (the hooks' A/B), and by
`mlflow models serve` with 1 and with 2 uvicorn workers. A closed-loop load of C
keep-alive clients on loopback sends the same one-window request to each, at each
concurrency, in rounds whose order rotates so the servers share the machine's load
conditions. Then the monitoring hooks' cost per request, split in-process.

    python benchmarks/serving_latency.py [--home H] [--rounds 3] [--concurrency 1,8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _report import write_section
from _serving_hooks import measure
from _serving_load import LoadResult, post_once, run_load
from _serving_report import render
from _serving_servers import (
    REPO,
    EngageApps,
    MlflowModelServer,
    batch_stats,
    cpu_by_pid,
    cpu_delta,
    cpu_seconds,
)

MODEL, VERSION = "smart-home-occupancy", "1"


def quickstart(home: Path, log: Path) -> float:
    """Register the model with `engage quickstart` (no deploy); returns its seconds."""
    started = time.perf_counter()
    cmd = [str(Path(sys.executable).with_name("engage")), "quickstart", "--home", str(home)]
    with log.open("a") as out:
        done = subprocess.run(
            [*cmd, "--set", "deploy.after_training=false"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            timeout=1800,
        )
    if done.returncode != 0:
        raise RuntimeError(f"quickstart failed; see {log}")
    return time.perf_counter() - started


def payload() -> bytes:
    """One (1, 30, 5) float32 window, the same bytes for every server."""
    x = np.random.default_rng(0).normal(size=(1, 30, 5)).astype(np.float32)
    return json.dumps({"inputs": x.round(4).tolist()}).encode()


def check_answers(servers: dict, body: bytes) -> dict[str, str]:
    """One request to each server: all 200, and the same predicted class everywhere."""
    shown, classes = {}, {}
    for name, (port, path, _pids) in servers.items():
        if name.startswith("floor"):
            continue
        status, answer = post_once(port, path, body)
        if status != 200:
            raise RuntimeError(f"{name} answered {status}: {answer}")
        if "probabilities" in answer:  # engage: labels and probabilities
            classes[name] = int(np.argmax(answer["probabilities"][0]))
        else:  # mlflow: the model's raw output rows
            classes[name] = int(np.argmax(answer["predictions"][0]))
        shown[name] = json.dumps(answer)[:160]
    if len(set(classes.values())) != 1:
        raise RuntimeError(f"servers disagree on the predicted class: {classes}")
    return shown


def idle_rates(servers: dict, seconds: float) -> dict[str, float]:
    """CPU seconds per second each server's processes use with no request (same window)."""
    roots = {name: pids() for name, (_p, _q, pids) in servers.items()}
    before = {name: cpu_seconds(r) for name, r in roots.items()}
    time.sleep(seconds)
    return {name: (cpu_seconds(r) - before[name]) / seconds for name, r in roots.items()}


def load_rounds(
    servers: dict, body: bytes, args, idle: dict[str, float], apps: dict[str, str], home: Path
) -> tuple[dict[tuple[str, int], LoadResult], dict[tuple[str, int], list[float]]]:
    """Rounds over concurrencies × servers; the server order rotates every round. A cell's
    server CPU is net of that server's idle rate over the cell's wall time. For engage's
    apps (``apps``: server -> app), the requests and model calls of each cell."""
    merged: dict[tuple[str, int], LoadResult] = {}
    batching: dict[tuple[str, int], list[float]] = {}
    names = list(servers)
    for r in range(args.rounds):
        for c in args.concurrency:
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                port, path, pids = servers[name]
                sent = None if name.startswith("floor") else body  # floors are GETs
                run_load(port, path, sent, c, 4 * c, 30)  # warm-up: connections, batcher
                n = args.requests_c1 if c == 1 else args.requests
                roots = pids()
                app = apps.get(name)
                calls0 = batch_stats(home, app) if app else None
                since = time.time()
                cpu0 = cpu_by_pid(roots)
                res = run_load(port, path, sent, c, n, args.time_cap)
                cpu1 = cpu_by_pid(roots)
                if app:
                    time.sleep(0.5)  # the hooks report every 0.2 s
                    calls1 = batch_stats(home, app)
                    cell = batching.setdefault((name, c), [0.0, 0.0])
                    cell[0] += calls1[0] - calls0[0]
                    cell[1] += calls1[1] - calls0[1]
                res.cpu_by_process = cpu_delta(cpu0, cpu1, since)
                res.server_cpu_s = sum(res.cpu_by_process.values()) - idle[name] * res.wall_s
                print(
                    f"round {r} c={c} {name}: {len(res.latencies)} ok, {res.errors} errors, "
                    f"{res.throughput:.1f} req/s, p50 {1000 * res.pct(0.5):.2f} ms, "
                    f"p99 {1000 * res.pct(0.99):.1f} ms, server CPU "
                    f"{res.cpu_ms_per_request:.2f} ms/req  (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
                m = merged.setdefault((name, c), LoadResult())
                m.latencies += res.latencies
                m.errors += res.errors
                m.first_error = m.first_error or res.first_error
                m.wall_s += res.wall_s
                m.server_cpu_s += res.server_cpu_s
                for k, v in res.cpu_by_process.items():
                    m.cpu_by_process[k] = m.cpu_by_process.get(k, 0.0) + v
    return merged, batching


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="an engage home with the model registered")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", type=int, default=3000, help="per cell at concurrency > 1")
    parser.add_argument("--requests-c1", type=int, default=1000, help="per cell at concurrency 1")
    parser.add_argument("--time-cap", type=float, default=30.0, help="seconds per cell at most")
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle CPU window, seconds")
    parser.add_argument("--hook-rounds", type=int, default=6)
    parser.add_argument("--hook-requests", type=int, default=300)
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="engage-bench-serving-") as tmp:
        logs = Path(tmp)
        home = (args.home or logs / "home").resolve()
        uri = f"sqlite:///{home / 'mlflow.db'}"
        qs_s = None if args.home else quickstart(home, logs / "quickstart.log")
        body = payload()
        engage = EngageApps(home, uri, logs / "engage.log")
        mlflows = [
            MlflowModelServer(f"models:/{MODEL}/{VERSION}", uri, w, logs / f"mlflow-w{w}.log")
            for w in (1, 2)
        ]
        try:
            servers: dict[str, tuple[int, str, Callable[[], list[int]]]] = {}
            starts, apps = {}, {}
            for replicas, hooks in ((1, True), (2, True), (1, False)):
                app = f"bench-r{replicas}" + ("" if hooks else "-nohooks")
                path, starts[app] = engage.deploy(f"{MODEL}/{VERSION}", app, replicas, hooks)
                name = f"engage, {replicas} replica{'s' * (replicas > 1)}"
                name += "" if hooks else ", hooks off"
                servers[name] = (engage.port, path, engage.pids)
                apps[name] = app
            for m in mlflows:
                starts[f"mlflow w{m.workers}"] = m.start()
                name = f"mlflow models serve, {m.workers} worker{'s' * (m.workers > 1)}"
                servers[name] = (m.port, "/invocations", m.pids)
            # The HTTP path without the model: engage's HAProxy -> replica, MLflow's uvicorn.
            servers["floor: engage GET /health (1 replica app)"] = (
                engage.port,
                "/bench-r1/health",
                engage.pids,
            )
            servers["floor: MLflow GET /ping (1 worker)"] = (
                mlflows[0].port,
                "/ping",
                mlflows[0].pids,
            )
            print("started", {k: round(v, 1) for k, v in starts.items()}, flush=True)
            answers = check_answers(servers, body)
            idle = idle_rates(servers, args.idle_s)
            print("idle CPU/s", {k: round(v, 3) for k, v in idle.items()}, flush=True)
            ingress = engage.ingress()
            results, batching = load_rounds(servers, body, args, idle, apps, home)
        except BaseException:
            for log in logs.glob("*.log"):
                print(f"--- {log.name} (tail)\n{log.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            for m in mlflows:
                m.stop()
            engage.stop()
        load_mid = os.getloadavg()[0]
        hooks = measure(home, uri, MODEL, VERSION, body, args.hook_rounds, args.hook_requests)
        print("hooks", hooks, flush=True)
    load_end = os.getloadavg()[0]
    command = (
        f"python benchmarks/serving_latency.py --rounds {args.rounds} "
        f"--concurrency {','.join(map(str, args.concurrency))} --requests {args.requests} "
        f"--requests-c1 {args.requests_c1} --time-cap {args.time_cap:g} --idle-s {args.idle_s:g} "
        f"--hook-rounds {args.hook_rounds} --hook-requests {args.hook_requests}"
    )
    loads = (load_start, load_mid, load_end)
    section = render(
        results, hooks, answers, starts, qs_s, loads, idle, args, command, batching, ingress
    )
    write_section("serving", section)


if __name__ == "__main__":
    main()
