"""The driver's CPU per point when its pump hands a worker's metrics on (issue 11, item 7).

In a job the training workers push their ``metrics()`` calls to the EventHub as rows (one
tuple per call) and the driver's :class:`~engage.events.EventPump` drains them every
0.25 s into the job's sinks: the metric sink writes them to the spool in one synced
transaction. That driver runs on the cores the workers use, so its CPU per point is read
by the workers' step loop too (docs/BENCHMARKS.md, "Tracking overhead where the step
runs").

This times that hand-on for one drain of 1,000 points (100 rows of 10 metrics, one labels
mapping, pickled and unpickled as the hub's reply is) in the same process, rounds
interleaved, each arm into its own spool file:

- ``before``: the path as it was at ``--before`` (default 6e7955d): every row expanded into
  Events (``from_rows``), then that commit's sinks' ``emit`` (loaded from git, not copied);
- ``after``: the batch handed to this tree's :class:`~engage.events.FanOut` as the pump
  hands it now: the metric and health sinks read the rows, Events are built only for a
  sink that has no ``emit_rows``;

each with two sets of sinks: ``spool`` (the metric sink alone, as the worker benchmark's
pump) and ``job`` (the sinks of ``engage run``, in :class:`~engage.runtime.context.JobSinks`
order: the metric sink, the health sink, the live monitor's
:class:`~engage.monitor.exporter.MonitorSink` (not serving; its Prometheus families
updated), the :class:`~engage.monitor.store_sink.StoreSink` on a SQLite event store, and
the console's :class:`~engage.cli.progress.RunDisplay` writing to a string; its drains are
a worker's step rows, ``step_breakdown``'s four times and ``samples``, which the monitor
exports). The ``job`` set has a third arm, ``rows/job``: the sinks as at ``--rows``
(default 8a6137f, where only the metric and health sinks read rows; the monitor, store and
display modules loaded from git) through this tree's FanOut, which builds Events for them.
``write`` alone: the spool's ``append_metrics`` of the same 1,000 points' columns (the
synced commit both paths end in).
Process CPU (``time.process_time``) and wall time per point; medians over rounds with
bootstrap 95% intervals of the paired after/before ratio.

    python benchmarks/tracking_driver_path.py [--rounds 300] [--before 6e7955d] [--rows 8a6137f]
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _report import git_commit, machine, write_section
from rich.console import Console

from engage import events as reporting
from engage.cli import progress
from engage.events import FanOut
from engage.monitor import exporter, store_sink
from engage.monitor.store import EventStore
from engage.tracking import PipelineRun, Spool
from engage.tracking import sinks as tracking_sinks

ROOT = Path(__file__).resolve().parents[1]
POINTS = 1_000
METRICS_PER_ROW = 10
#: A training worker's row per step (engage.train.loop): step_breakdown's times, samples.
STEP_NAMES = (
    "step_seconds",
    "data_wait_seconds",
    "host_to_device_seconds",
    "compute_seconds",
    "samples",
)


def module_at(commit: str, path: str, name: str) -> types.ModuleType:
    """The module at ``path`` as it was at ``commit`` (``git show``), loaded under ``name``."""
    source = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType(name)
    module.__file__ = f"{commit}:{path}"
    sys.modules[name] = module  # dataclasses and typing look modules up by name
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


class _Drains:
    """One drain's rows after another, steps going on, as the hub's reply arrives."""

    def __init__(self, names: tuple[str, ...] | None = None) -> None:
        self.step = 0
        self.names = names or tuple(f"m{k}" for k in range(METRICS_PER_ROW))

    def next(self) -> list[tuple]:
        """The next drain's rows: 1,000 points, one labels mapping, as unpickled."""
        labels = {"rank": "0"}
        rows = []
        width = len(self.names)
        for _ in range(POINTS // width):
            values = tuple(0.001 * k + self.step for k in range(width))
            rows.append(
                (
                    reporting.POINTS,
                    self.names,
                    values,
                    self.step,
                    1_700_000_000_000 + self.step,
                    labels,
                    None,
                )
            )
            self.step += 1
        return pickle.loads(pickle.dumps(rows))  # shared objects as Ray's unpickling leaves them


def _run(home: Path, name: str) -> tuple[Spool, PipelineRun]:
    spool = Spool(home / f"{name}.db")
    local = spool.create_run("sqlite:///unused.db", "driver-path", name, {})
    return spool, PipelineRun(spool, local, "sqlite:///unused.db", "driver-path")


def _job_sinks(
    home: Path, name: str, tracking: Any, monitor: Any, store: Any, display: Any
) -> list[Any]:
    """``engage run``'s sinks in JobSinks order, from the given modules, into ``name``'s files."""
    _, run = _run(home, name)
    console = Console(file=io.StringIO(), force_terminal=False, width=120)
    shown = display.RunDisplay(console, "classification", epochs=10)
    shown.stage("train")
    return [
        tracking.MetricSink(run),
        tracking.HealthSink(run, lambda events: None),
        monitor.MonitorSink("bench", name, home),  # not started: no server, no discovery file
        store.StoreSink(EventStore(f"sqlite:///{home / name}-events.db"), "bench", name),
        shown,
    ]


def _modules_at(commit: str) -> dict[str, types.ModuleType]:
    """The job's row-less sinks (monitor, store, display) as they were at ``commit``."""
    metrics = module_at(commit, "platform/engage/monitor/metrics.py", f"engage_metrics_{commit}")
    monitor = module_at(commit, "platform/engage/monitor/exporter.py", f"engage_monitor_{commit}")
    monitor.JobMetrics = metrics.JobMetrics  # the exporter of that commit on its own metrics
    store = module_at(commit, "platform/engage/monitor/store_sink.py", f"engage_store_{commit}")
    display = module_at(commit, "platform/engage/cli/progress.py", f"engage_progress_{commit}")
    return {"monitor": monitor, "store": store, "display": display}


def _arms(
    home: Path, before: types.ModuleType, rows: dict[str, types.ModuleType]
) -> dict[str, Callable[[list[tuple]], None]]:
    """Each arm: a function that hands one drain's rows on, into its own spool."""
    arms: dict[str, Callable[[list[tuple]], None]] = {}
    for sinks in ("spool", "job"):
        if sinks == "job":  # the monitor, store and display of --rows, as at --before
            old = _job_sinks(home, f"before-{sinks}", before, **rows)
        else:
            _, run_b = _run(home, f"before-{sinks}")
            old = [before.MetricSink(run_b)]

        def old_path(rows: list[tuple], old: list = old) -> None:
            events = reporting.from_rows(rows)  # the pump's expansion, unchanged by this work
            for sink in old:  # FanOut.send as it was
                sink.emit(events)

        arms[f"before/{sinks}"] = old_path
        if sinks == "job":
            tracking = tracking_sinks  # unchanged since --rows: its sinks read rows there
            arms["rows/job"] = FanOut(_job_sinks(home, "rows-job", tracking, **rows)).send
            now = {"monitor": exporter, "store": store_sink, "display": progress}
            arms["after/job"] = FanOut(_job_sinks(home, "after-job", tracking, **now)).send
        else:
            _, run_a = _run(home, f"after-{sinks}")
            arms[f"after/{sinks}"] = FanOut([tracking_sinks.MetricSink(run_a)]).send
    spool_w, run_w = _run(home, "write")

    def write(rows: list[tuple]) -> None:
        keys, values, steps, stamps = [], [], [], []
        for _, names, vals, step, ts, _, _ in rows:
            keys += names
            values += vals
            steps += [step] * len(names)
            stamps += [ts] * len(names)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        spool_w.append_metrics(run_w.local_id, keys, values, steps, stamps)
        write.last = (time.process_time() - cpu0, time.perf_counter() - wall0)  # type: ignore[attr-defined]

    arms["write"] = write
    return arms


def _ci_ratio(
    after: list[float], before: list[float], resamples: int = 4000
) -> tuple[float, float]:
    """A bootstrap 95% interval of median(after) / median(before), rounds resampled in pairs."""
    a, b = np.asarray(after), np.asarray(before)
    rng = np.random.default_rng(11)
    idx = rng.integers(0, len(a), size=(resamples, len(a)))
    ratios = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def measure(rounds: int, before_commit: str, rows_commit: str) -> dict[str, Any]:
    """Per arm, the CPU and wall µs per point of every round; the arms rotate each round."""
    before = module_at(before_commit, "platform/engage/tracking/sinks.py", "engage_sinks_before")
    rows = _modules_at(rows_commit)
    with tempfile.TemporaryDirectory(prefix="engage-driver-path-") as tmp:
        arms = _arms(Path(tmp), before, rows)
        drains = {name: _Drains(STEP_NAMES if "job" in name else None) for name in arms}
        cpu: dict[str, list[float]] = {name: [] for name in arms}
        wall: dict[str, list[float]] = {name: [] for name in arms}
        names = list(arms)
        for name in names:  # warm-up
            arms[name](drains[name].next())
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                rows = drains[name].next()
                cpu0, wall0 = time.process_time(), time.perf_counter()
                arms[name](rows)
                spent = (time.process_time() - cpu0, time.perf_counter() - wall0)
                if name == "write":  # only the append, not building its columns
                    spent = arms[name].last  # type: ignore[attr-defined]
                cpu[name].append(spent[0] / POINTS * 1e6)
                wall[name].append(spent[1] / POINTS * 1e6)
    return {
        "cpu": cpu,
        "wall": wall,
        "rounds": rounds,
        "before": before_commit,
        "rows": rows_commit,
    }


def report(res: dict[str, Any]) -> str:
    """The figures as a Markdown table and the paired ratios."""
    cpu, wall = res["cpu"], res["wall"]
    lines = [
        f"{res['rounds']} rounds of one 1,000-point drain per arm (before = {res['before']}, "
        f"rows = {res['rows']}); "
        f"load {os.getloadavg()[0]:.2f} at the end",
        "",
        "| arm | CPU µs/point median [p10, p90] | wall µs/point median |",
        "| --- | --- | --- |",
    ]
    for name in cpu:
        c = np.percentile(cpu[name], [10, 90])
        lines.append(
            f"| {name} | {statistics.median(cpu[name]):.3f} [{c[0]:.3f}, {c[1]:.3f}] | "
            f"{statistics.median(wall[name]):.3f} |"
        )
    lines.append("")
    for after, before in (
        ("after/spool", "before/spool"),
        ("after/job", "before/job"),
        ("after/job", "rows/job"),
    ):
        a, b = cpu[after], cpu[before]
        lo, hi = _ci_ratio(a, b)
        lines.append(
            f"{after} vs {before}: CPU {statistics.median(a) / statistics.median(b):.2f}× "
            f"[95% CI {lo:.2f}, {hi:.2f}]; saved "
            f"{statistics.median(b) - statistics.median(a):.2f} µs per point"
        )
    return "\n".join(lines)


def _markdown(text: str) -> str:
    """The docstring's reST roles and double backticks as Markdown code spans."""
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")


def main() -> None:
    """Run the arms and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--before", default="6e7955d", help="the commit of the path before")
    parser.add_argument(
        "--rows", default="8a6137f", help="the commit of the job's monitor, store and display"
    )
    parser.add_argument(
        "--print-only", action="store_true", help="print, leave docs/BENCHMARKS.md as it is"
    )
    args = parser.parse_args()
    table = report(measure(args.rounds, args.before, args.rows))
    print(table)
    if args.print_only:
        return
    command = f"python benchmarks/tracking_driver_path.py --rounds {args.rounds}"
    write_section(
        "tracking-driver",
        "## The driver's CPU per reported point (issue 11)\n\n"
        f"Machine: {machine()}. Commit {git_commit()}. Command: `{command}`.\n\n"
        + _markdown((__doc__ or "").split("\n\n    python")[0].split("\n", 1)[1].strip())
        + "\n\n"
        + table,
    )


if __name__ == "__main__":
    main()
