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
pump) and ``job`` (the metric sink, the health sink and a display that takes Events and
ignores metrics, as ``engage run``'s console does), and ``write`` alone: the spool's
``append_metrics`` of the same 1,000 points' columns (the synced commit both paths end in).
Process CPU (``time.process_time``) and wall time per point; medians over rounds with
bootstrap 95% intervals of the paired after/before ratio.

    python benchmarks/tracking_driver_path.py [--rounds 300] [--before 6e7955d]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engage import events as reporting
from engage.events import FanOut
from engage.tracking import PipelineRun, Spool
from engage.tracking.sinks import HealthSink, MetricSink

ROOT = Path(__file__).resolve().parents[1]
POINTS = 1_000
METRICS_PER_ROW = 10


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


class _Display:
    """A sink that takes Events and ignores metrics, as ``engage run``'s console does."""

    def __init__(self) -> None:
        self.seen = 0

    def emit(self, events: Sequence[Any]) -> None:
        """Look at every event, count the ones that are not metrics."""
        for e in events:
            if e.kind != "metric":
                self.seen += 1


class _Drains:
    """One drain's rows after another, steps going on, as the hub's reply arrives."""

    def __init__(self) -> None:
        self.step = 0
        self.names = tuple(f"m{k}" for k in range(METRICS_PER_ROW))

    def next(self) -> list[tuple]:
        """The next drain's rows: 1,000 points, one labels mapping, as unpickled."""
        labels = {"rank": "0"}
        rows = []
        for _ in range(POINTS // METRICS_PER_ROW):
            values = tuple(0.001 * k + self.step for k in range(METRICS_PER_ROW))
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


def _arms(home: Path, before: types.ModuleType) -> dict[str, Callable[[list[tuple]], None]]:
    """Each arm: a function that hands one drain's rows on, into its own spool."""
    arms: dict[str, Callable[[list[tuple]], None]] = {}
    for sinks in ("spool", "job"):
        _, run_b = _run(home, f"before-{sinks}")
        old = [before.MetricSink(run_b)]
        if sinks == "job":
            old += [before.HealthSink(run_b, lambda events: None), _Display()]

        def old_path(rows: list[tuple], old: list = old) -> None:
            events = reporting.from_rows(rows)  # the pump's expansion, unchanged by this work
            for sink in old:  # FanOut.send as it was
                sink.emit(events)

        _, run_a = _run(home, f"after-{sinks}")
        new: list[Any] = [MetricSink(run_a)]
        if sinks == "job":
            new += [HealthSink(run_a, lambda events: None), _Display()]
        arms[f"before/{sinks}"] = old_path
        arms[f"after/{sinks}"] = FanOut(new).send
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


def measure(rounds: int, before_commit: str) -> dict[str, Any]:
    """Per arm, the CPU and wall µs per point of every round; the arms rotate each round."""
    before = module_at(before_commit, "platform/engage/tracking/sinks.py", "engage_sinks_before")
    with tempfile.TemporaryDirectory(prefix="engage-driver-path-") as tmp:
        arms = _arms(Path(tmp), before)
        drains = {name: _Drains() for name in arms}
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
    return {"cpu": cpu, "wall": wall, "rounds": rounds, "before": before_commit}


def report(res: dict[str, Any]) -> str:
    """The figures as a Markdown table and the paired ratios."""
    cpu, wall = res["cpu"], res["wall"]
    lines = [
        f"{res['rounds']} rounds of one 1,000-point drain per arm (before = {res['before']}); "
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
    for sinks in ("spool", "job"):
        a, b = cpu[f"after/{sinks}"], cpu[f"before/{sinks}"]
        lo, hi = _ci_ratio(a, b)
        lines.append(
            f"{sinks}: after/before CPU {statistics.median(a) / statistics.median(b):.2f}× "
            f"[95% CI {lo:.2f}, {hi:.2f}]; saved "
            f"{statistics.median(b) - statistics.median(a):.2f} µs per point"
        )
    return "\n".join(lines)


def main() -> None:
    """Run the arms and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--before", default="6e7955d", help="the commit of the path before")
    args = parser.parse_args()
    print(report(measure(args.rounds, args.before)))


if __name__ == "__main__":
    main()
