"""Tracking overhead (issue 3): what logging costs the training thread, and how the spool drains.

Three measurements, each against a baseline measured in the same run:

1. Latency per call on the calling thread: engage's ``Reporter.metric`` into the spool sink
   (its flushes every 256 events amortised in, the drainer sending meanwhile) versus
   ``MlflowClient.log_metric`` synchronous and asynchronous, on one local SQLite MLflow store.
   The three are interleaved in rounds so machine load hits them alike.
2. The step time of a small torch MLP (one thread, fixed seed) without logging (A) and with
   engage reporting 10 metrics per step (B: Reporter -> spool, the drainer sending to
   the SQLite store from its own process at nice 19, as in a real job since issue 11); two
   more arms: S (spool, no drainer) and T (the drainer a thread of the training process, as
   before issue 11). The arms' order rotates per repetition.
3. Drain throughput of spooled points to the SQLite store and to a local ``mlflow server``
   versus plain ``log_batch`` of the same points, and an outage: the server SIGKILLed while
   a request is in flight and restarted, then every point counted in MLflow.

    python benchmarks/tracking_overhead.py [--calls 20000] [--sync-calls 1000]
        [--async-calls 2000] [--rounds 4] [--steps 1000] [--reps 6] [--points 50000]
        [--outage-s 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _report import git_commit, machine, write_section
from _tracking_drain import drain_throughput, outage
from _tracking_latency import latency
from _tracking_train import ARMS, METRICS_PER_STEP, training_overhead

T0 = time.perf_counter()


def latency_table(lat: dict[str, dict]) -> str:
    base = lat["engage"]
    rows = [
        f"| {name} | {s['n']} | {s['median']:.1f} | {s['p99']:.1f} | {s['mean']:.1f} | "
        f"{s['median'] / base['median']:.0f}× | {s['mean'] / base['mean']:.0f}× | {s['landed']} |"
        for name, s in lat.items()
    ]
    head = (
        "| call | calls timed | median µs | p99 µs | mean µs | median ÷ engage | mean ÷ engage "
        "| points in MLflow after |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    return head + "\n" + "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="engage calls timed")
    parser.add_argument("--sync-calls", type=int, default=1000, help="synchronous calls timed")
    parser.add_argument("--async-calls", type=int, default=2000, help="asynchronous calls timed")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved latency rounds")
    parser.add_argument("--steps", type=int, default=1000, help="training steps per repetition")
    parser.add_argument("--reps", type=int, default=6, help="repetitions of each arm")
    parser.add_argument("--points", type=int, default=50000, help="points spooled then drained")
    parser.add_argument("--outage-s", type=float, default=5.0, help="seconds the server is down")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="engage-tracking-bench-") as tmp:
        home = Path(tmp)
        uri = f"sqlite:///{home / 'mlflow.db'}"
        lat = latency(home, uri, args.calls, args.sync_calls, args.async_calls, args.rounds)
        print(f"latency done at {time.perf_counter() - T0:.0f} s")
        train = training_overhead(home, uri, args.steps, args.reps)
        print(f"training done at {time.perf_counter() - T0:.0f} s")
        # A local `mlflow server` may not come up in time on a loaded machine: say so in
        # the section rather than lose the figures measured before it.
        drain = _or_reason(lambda: drain_throughput(home, uri, args.points))
        print(f"drain throughput done at {time.perf_counter() - T0:.0f} s")
        down = _or_reason(lambda: outage(home, args.outage_s))
        print(f"outage done at {time.perf_counter() - T0:.0f} s")
    load_after = os.getloadavg()[0]
    body = report(args, lat, train, drain, down, (load_before, load_after))
    write_section("tracking", body)
    print(body)


def _or_reason(measure):
    """The measurement, or the reason it could not be taken (a string)."""
    try:
        return measure()
    except Exception as exc:  # the local MLflow server did not start, or timed out
        return f"not measured in this run: {type(exc).__name__}: {str(exc).splitlines()[0]}"


def command(args: argparse.Namespace) -> str:
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items())
    return f"python benchmarks/tracking_overhead.py {flags}"


def latency_section(lat: dict[str, dict]) -> str:
    engage, sync = lat["engage"], lat["mlflow sync"]
    ratio = sync["mean"] / engage["mean"]
    verdict = "met" if ratio >= 100 else "NOT met"
    return f"""### Latency per call on the training thread

One local SQLite MLflow store for all three; the three are interleaved in rounds, engage with
its drainer sending to that store meanwhile. engage's mean includes its flush to the
spool every 256 calls (one synced SQLite transaction).

{latency_table(lat)}

Ratio synchronous / engage: **{sync["median"] / engage["median"]:.0f}× on the median,
{ratio:.0f}× on the mean** (p99 {sync["p99"] / engage["p99"]:.0f}×). Target ≥ 100× → **{verdict}**
(judged on the mean, which carries engage's flushes). MLflow's asynchronous call returns fast
but, unless `MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS` is set, its queue writes each call as a
log_batch of one: its backlog landed at {lat["mlflow async"]["backlog_pps"]:.0f} points/s, and
nothing of it is durable if the process dies first (engage's points are on disk after each
flush)."""


def training_section(train: dict) -> str:
    arms = train["arms"]
    rows = "\n".join(
        f"| {n}: {ARMS[n]} | {a['median_ms']:.3f} | {a['mean_ms']:.3f} | {a['p99_ms']:.2f} | "
        f"{100 * a['overhead_median']:+.1f}% | {100 * a['overhead_mean']:+.1f}% | "
        f"{a['extra_us_per_step']:+.0f} | "
        + (f"{a['drainer_cpu_us_per_point']:.0f} |" if n in "BT" else "– |")
        for n, a in arms.items()
    )
    s, b, t = (arms[n] for n in "SBT")
    rate = METRICS_PER_STEP / (b["mean_ms"] / 1e3)
    met = b["overhead_median"] <= 0.01
    return f"""### Training step overhead, 10 metrics per step

A 64-256-256-1 MLP with Adam on one fixed random batch of 256, `torch.set_num_threads(1)`, seed 0;
{train["steps"]} steps per repetition, {train["reps"]} repetitions of each arm, the arms' order
rotating each repetition. The 10 metric values are computed in every arm; only reporting differs.
B logs about {rate:.0f} points/s. The drainer's CPU is read from its process's (B) or thread's (T)
CPU clock over the repetitions, draining included. Since issue 11 every job's drainer is a
separate process at nice 19 (B; `Drainer.start()`), and the Reporter hands each full batch of
256 points to a background thread, which writes it to the spool (one synced SQLite transaction),
so the training thread only appends to a list.

| arm | median step ms | mean step ms | p99 ms | overhead (median) | overhead (mean) | µs per step vs A | drainer CPU µs per point |
| --- | --- | --- | --- | --- | --- | --- | --- |
{rows}

Target ≤ 1% for B (a real job), on the median step → **{"met" if met else "NOT met"}**:
{100 * b["overhead_median"]:+.1f}% on the median, {100 * b["overhead_mean"]:+.1f}% on the mean (the
mean carries the machine's other load: on 2 shared cores the drainer process and the spool
writer still take CPU time that some steps wait for).

Where the cost goes, in mean µs per step over A: engage's own work in the training process
(S: Reporter, and the background spool write) {s["extra_us_per_step"]:+.0f}; the drainer process
beside it (B − S) {b["extra_us_per_step"] - s["extra_us_per_step"]:+.0f}, for
{b["drainer_cpu_us_per_step"]:.0f} µs of CPU it spent per step while the steps ran
({b["drainer_cpu_us_per_point"]:.0f} µs per point drained, {rate * b["drainer_cpu_us_per_point"] / 1e6:.0%} of a core at
B's rate, at the lowest priority). The drainer as a thread of the training process (T, the
layout before issue 11) costs {t["extra_us_per_step"]:+.0f} µs per step
({100 * t["overhead_median"]:+.1f}% median, {100 * t["overhead_mean"]:+.1f}% mean): MLflow's SQLAlchemy
store holds the training thread's GIL for most of its {t["drainer_cpu_us_per_point"]:.0f} µs per point.

In an engage job the training loop runs in Ray Train worker processes: a worker pays its
Reporter and a push to the job's event hub (from the background thread), and the driver spools;
this benchmark (no Ray) puts the spool writer in the training process, the heavier case.
At B's mean cost the 1% target holds for steps of {max(b["extra_us_per_step"], 0) / 10:.1f} ms or more at
10 metrics per step."""


def drain_section(drain: dict | str) -> str:
    if isinstance(drain, str):
        return f"### Drain throughput\n\n{drain}"
    rows = []
    for name, label in (("sqlite", "local SQLite store"), ("server", "local `mlflow server`")):
        d = drain[name]
        rows.append(
            f"| {label} | {d['engage_pps']:.0f} | {d['direct_pps']:.0f} | "
            f"{d['engage_pps'] / d['direct_pps']:.2f}× | {d['engage_cpu_us']:.0f} | {d['direct_cpu_us']:.0f} |"
        )
    return f"""### Drain throughput

{drain["sqlite"]["points"]} points spooled (256 per transaction, as the Reporter writes them), then
one drainer pass timed; baseline: plain `MlflowClient.log_batch` of the same points, 1000 per
request, to the same target. Median of 3 of each, order alternated, after a warm-up request. The server: `mlflow server --workers 1` on 127.0.0.1, SQLite
backend, started in {drain["server_startup_s"]:.0f} s.

| target | engage drainer points/s | direct log_batch points/s | engage / direct | drainer CPU µs/point (this process) | direct CPU µs/point |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}"""


def outage_section(down: dict | str) -> str:
    if isinstance(down, str):
        return f"### Outage: server SIGKILLed mid-stream, then restarted\n\n{down}"
    ok = down["duplicates"] == 0 and down["missing"] == 0 and down["drained"]
    return f"""### Outage: server SIGKILLed mid-stream, then restarted

A producer thread reports 10 metrics every 10 ms through a Reporter into the spool
({down["rate_pps"]:.0f} points/s nominal) while the drainer thread sends to the local server; the
server's process group is SIGKILLed {"while a log_batch request was in flight" if down["mid_request"] else "(no request happened to be in flight)"},
left down, restarted on the same port and database. Counts come from `get_metric_history`.

| figure | value |
| --- | --- |
| server down (kill → healthy again) | {down["down_s"]:.1f} s (restart {down["restart_s"]:.1f} s) |
| points reported in all | {down["logged"]} |
| points reported during the outage | {down["outage_points"]} |
| of those, in MLflow afterwards | {down["recovered"]} |
| missing from MLflow | {down["missing"]} |
| duplicates (rows − distinct key/step) | **{down["duplicates"]}** |
| server back → run fully drained | {down["caught_up_s"]:.1f} s (drainer backoff included) |
| report call (10 metrics) mean / p99 before the outage | {down["mean_before_us"]:.0f} / {down["p99_before_us"]:.0f} µs |
| report call (10 metrics) mean / p99 during the outage | {down["mean_during_us"]:.0f} / {down["p99_during_us"]:.0f} µs |
| the drainer's first failed request | `{down["first_failure"][:120]}` |

No loss and no duplicates → **{"met" if ok else "NOT met"}**."""


def report(args, lat, train, drain, down, load) -> str:
    return f"""## Tracking overhead (issue 3)

Machine: {machine()}. Commit {git_commit()}. Command: `{command(args)}`.
Load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end: other jobs shared
these 2 cores, so the figures carry that noise; the baselines ran interleaved with them.

{latency_section(lat)}

{training_section(train)}

{drain_section(drain)}

{outage_section(down)}
"""


if __name__ == "__main__":
    main()
