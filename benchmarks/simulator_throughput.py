"""Simulator throughput: sensor readings per second on one core and on all cores (issue 17).

One core: :func:`engage.data.simulator.simulate_block` in this process, the full model on
(routines, weather, RC thermal model with heating control, air, appliances, noise, 1 %
dropouts, 5 % faulty sensors, labels), with and without writing the Parquet shard. All
cores: :func:`engage.data.simulator.write_shards` with one Ray task per shard. Baseline,
measured in the same run: the ``synthetic`` generator (:func:`generate_smart_living`, five
sensors). A reading is one sensor value of one household-minute; labels, timestamps and ids
are not counted. Each figure is the median of ``--repeats`` runs.

Usage: ``python benchmarks/simulator_throughput.py [--households 32 --days 14 --repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import git_commit, machine, write_section

from engage.data.simulator import SENSORS, simulate_block, write_shards
from engage.data.simulator.shards import Block, write_block
from engage.data.synthetic import generate_smart_living

SCENARIO = {"dropout_rate": 0.01, "fault_rate": 0.05}
TARGET = 1_000_000  # readings per second per core (issue 17)


def _median_rate(run, readings: int, repeats: int) -> float:
    """Median readings per second over ``repeats`` calls of ``run``."""
    rates = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        rates.append(readings / (time.perf_counter() - began))
    return statistics.median(rates)


def one_core(households: int, days: int, repeats: int, folder: Path) -> dict[str, float]:
    """Readings/s in this process: synthetic baseline, simulator, simulator plus Parquet."""
    rows = households * days * 1440
    block = Block(0, households, 0, days)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "synthetic": _median_rate(
            lambda: generate_smart_living(households, days, 0, "2026-01-05", 1.0), rows * 5, repeats
        ),
        "simulate": _median_rate(
            lambda: simulate_block(
                SCENARIO, seed=0, first_household=0, households=households, first_day=0, days=days
            ),
            rows * len(SENSORS),
            repeats,
        ),
        "simulate+parquet": _median_rate(
            lambda: write_block(SCENARIO, 0, "2026-01-05", block, households, str(folder)),
            rows * len(SENSORS),
            repeats,
        ),
    }


def all_cores(households: int, days: int, per_shard: int, folder: Path, repeats: int):
    """Readings/s of write_shards over Ray tasks on every core (Ray started here)."""
    import ray

    cores = os.cpu_count() or 1
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        write_shards(SCENARIO, folder, households=cores, days=1, seed=0, households_per_shard=1)
        reports = [
            write_shards(
                SCENARIO,
                folder,
                households=households,
                days=days,
                seed=0,
                households_per_shard=per_shard,
            )
            for _ in range(repeats)
        ]
    finally:
        ray.shutdown()
    best = statistics.median(r.readings_per_second for r in reports)
    return cores, best, reports[-1]


def _verdict(rate: float) -> str:
    return f"{'met' if rate >= TARGET else 'NOT met'} ({rate / TARGET:.1f}x the target)"


def render(
    args, single: dict[str, float], cores: int, parallel: float, report, command: str
) -> str:
    """The docs/BENCHMARKS.md section."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    per_core = parallel / cores
    return f"""## Simulator throughput (issue 17)

Machine: {machine()}. Commit {git_commit()}. Command: `{command}`.
Load average at the end (1, 5, 15 min): {load}; other processes shared the cores.

Scenario: defaults with 1 % dropouts and 5 % faulty sensors (noise, faults and labels on);
{len(SENSORS)} sensors a household-minute. One core: {args.households} households x
{args.days} days in one block, median of {args.repeats}. All cores:
{args.households * args.shard_factor} households x {args.days} days as {report.shards}
Parquet shards of {args.per_shard} households, one Ray task each, median of {args.repeats}
(Ray start-up not counted, workers warmed first).

| generator | readings/s | ratio to synthetic |
| --- | --- | --- |
| synthetic (baseline, 5 sensors, one core) | {single["synthetic"]:,.0f} | 1.00 |
| simulator, one core | {single["simulate"]:,.0f} | {single["simulate"] / single["synthetic"]:.2f} |
| simulator + Parquet shard, one core | {single["simulate+parquet"]:,.0f} | {single["simulate+parquet"] / single["synthetic"]:.2f} |
| simulator + Parquet shards, {cores} cores (Ray tasks) | {parallel:,.0f} | {parallel / single["synthetic"]:.2f} |
| the same, per core | {per_core:,.0f} | {per_core / single["synthetic"]:.2f} |

Target: >= {TARGET:,} readings/s per core.
- one core, generation only: {_verdict(single["simulate"])}
- one core, with Parquet writing: {_verdict(single["simulate+parquet"])}
- all cores through Ray, per core: {_verdict(per_core)}
"""


def main() -> int:
    """Measure, print and write the docs/BENCHMARKS.md section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--households", type=int, default=8, help="one core: one block of these")
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--per-shard", type=int, default=8)
    parser.add_argument(
        "--shard-factor", type=int, default=16, help="all-cores households = this x --households"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    command = "python benchmarks/simulator_throughput.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="engage-sim-bench-") as tmp:
        single = one_core(args.households, args.days, args.repeats, Path(tmp) / "one")
        cores, parallel, report = all_cores(args.households * args.shard_factor, args.days,
                                            args.per_shard, Path(tmp) / "all", args.repeats)  # fmt: skip
    text = render(args, single, cores, parallel, report, command.strip())
    print(text)
    if not args.no_write:
        write_section("simulator", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
