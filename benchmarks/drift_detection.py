"""Drift detection on smart-living scenario streams: delay, false alarms, throughput.

For each detector configuration and scenario (engage.monitor.drift.scenarios): detection
delay in rows after the change point (median over seeds; missed = no alarm within the
stream), false alarms per 10,000 rows on no-drift streams, and throughput (rows/s, one
core: torch and BLAS limited to one thread). Every configuration targets the same
false-alarm rate: online detectors are configured with the same ERT, and batch tests run
on tumbling windows of W rows at p = W / ERT, so all expect 10,000 / ERT false alarms per
10,000 rows. engage's default is ``cusum`` (built in) plus the ``quality`` check.

    python benchmarks/drift_detection.py [--seeds 20] [--ert 500] [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import git_commit, machine, write_section

from engage.monitor.drift import make_detector
from engage.monitor.drift.scenarios import SCENARIOS, make_stream, population

CHUNK = 50  # rows per check() call, as a sampler would hand them over
BATCH_WINDOW = 100


def configs(ert: float, quick: bool) -> dict[str, dict]:
    """name -> detectors (name, options), seeds cap, no-drift rows for the FA rate."""
    boot = 1000 if quick else int(10 * ert)
    online = {"ert": ert, "window_size": 20, "n_bootstraps": boot, "n_ref": 500}
    alpha = BATCH_WINDOW / ert
    return {
        "engage default (cusum + quality)": {
            "detectors": [("cusum", {"ert": ert}), ("quality", {"window": 10})],
            "fa_rows": 200_000,
        },
        "cusum alone": {"detectors": [("cusum", {"ert": ert})], "fa_rows": 200_000},
        "alibi mmd_online": {"detectors": [("mmd_online", online)], "fa_rows": 30_000},
        "alibi lsdd_online": {"detectors": [("lsdd_online", online)], "fa_rows": 30_000},
        "alibi cvm_online": {"detectors": [("cvm_online", online)], "fa_rows": 30_000},
        f"alibi ks (windows of {BATCH_WINDOW})": {
            "detectors": [("ks", {"p_val": alpha})],
            "batch": True,
            "fa_rows": 200_000,
        },
        f"alibi cvm (windows of {BATCH_WINDOW})": {
            "detectors": [("cvm", {"p_val": alpha})],
            "batch": True,
            "fa_rows": 200_000,
        },
    }


def run(detectors, x: np.ndarray, batch: bool, stop_after: int | None) -> tuple[list[int], float]:
    """Alarm row indices and seconds spent in check(); stops at the first alarm >= stop_after."""
    for d in detectors:
        d.reset()
    step = BATCH_WINDOW if batch else CHUNK
    alarms, spent = [], 0.0
    for lo in range(0, len(x) - (step - 1 if batch else 0), step):
        chunk = x[lo : lo + step]
        for d in detectors:
            t = time.perf_counter()
            r = d.check(chunk)
            spent += time.perf_counter() - t
            if r.error:
                raise RuntimeError(f"{d.name}: {r.error}")
            if batch and r.is_drift:
                alarms.append(lo + len(chunk) - 1)
            elif r.is_drift:
                alarms += [lo + i for i in r.extra.get("alarms", [r.alarm_index])]
        if stop_after is not None and any(a >= stop_after for a in alarms):
            break
    return sorted(alarms), spent


def bench(name: str, cfg: dict, seeds: int, pop) -> dict:
    t = time.perf_counter()
    dets = [make_detector(n, **o).fit(pop.reference) for n, o in cfg["detectors"]]
    setup = time.perf_counter() - t
    batch, rows, spent = cfg.get("batch", False), 0, 0.0
    delays: dict[str, list[float]] = {}
    for scenario in SCENARIOS[1:]:
        delays[scenario] = []
        for seed in range(min(seeds, cfg.get("seeds", seeds))):
            s = make_stream(scenario, seed, pop=pop)
            alarms, sec = run(dets, s.x, batch, s.change_at)
            after = [a for a in alarms if a >= s.change_at]
            delays[scenario].append(after[0] - s.change_at if after else float("inf"))
            rows, spent = (
                rows + (max(alarms[-1], s.change_at) + 1 if alarms else len(s.x)),
                spent + sec,
            )
    fa, fa_rows, seed = 0, 0, 1000
    while fa_rows < cfg["fa_rows"]:
        s = make_stream("no_drift", seed, n=10_000, pop=pop)
        alarms, sec = run(dets, s.x, batch, None)
        fa, fa_rows, seed = fa + len(alarms), fa_rows + len(s.x), seed + 1
        rows, spent = rows + len(s.x), spent + sec
    print(
        f"{name}: setup {setup:.1f}s, {rows / spent:,.0f} rows/s, FA {fa / fa_rows * 1e4:.1f}",
        flush=True,
    )
    return {
        "setup": setup,
        "rows_s": rows / spent,
        "fa": fa / fa_rows * 1e4,
        "delays": delays,
        "seeds": min(seeds, cfg.get("seeds", seeds)),
        "fa_rows": fa_rows,
    }


def _cell(values: list[float]) -> str:
    missed = sum(v == float("inf") for v in values)
    med = statistics.median(values)
    text = "missed" if med == float("inf") else f"{med:.0f}"
    return text + (f" ({missed}/{len(values)} missed)" if missed else "")


def report(results: dict[str, dict], ert: float, seconds: float) -> str:
    head = (
        "| configuration | seeds | "
        + " | ".join(SCENARIOS[1:])
        + " | FA / 10k rows | rows/s | setup s |"
    )
    lines = [head, "|" + " --- |" * (len(SCENARIOS) + 4)]
    for name, r in results.items():
        cells = " | ".join(_cell(r["delays"][s]) for s in SCENARIOS[1:])
        lines.append(
            f"| {name} | {r['seeds']} | {cells} | {r['fa']:.1f} ({r['fa_rows']:,} rows) | "
            f"{r['rows_s']:,.0f} | {r['setup']:.1f} |"
        )
    return f"""## Drift detection on scenario streams

`python benchmarks/drift_detection.py` on {machine()}, commit {git_commit()}, {seconds:.0f} s.

Streams: rows of 4 sensors (temperature, humidity, CO2, power) drawn i.i.d. from one
simulated population of 12 households x 4 days; the reference is the other half of the
rows; the change comes at row 500 (see `engage/monitor/drift/scenarios.py`). Cells are the
median detection delay in rows after the change (the gradual ramp: after its start). All
configurations target the same false-alarm rate: ERT {ert:g} rows for online detectors,
p = {BATCH_WINDOW}/{ert:g} per tumbling window of {BATCH_WINDOW} rows for batch tests, i.e.
{1e4 / ert:g} expected false alarms per 10,000 rows; the measured rate is in the FA column.
Rows are checked {CHUNK} at a time; throughput is rows per second of `check()` on one
thread (setup = fit/configure, once per model version).

{chr(10).join(lines)}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--ert", type=float, default=500)
    ap.add_argument("--quick", action="store_true", help="few seeds and bootstraps; no report")
    ap.add_argument("--only", default="", help="comma-separated configuration name prefixes")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    pop = population()
    results = {}
    for name, cfg in configs(args.ert, args.quick).items():
        if args.only and not any(name.startswith(p) for p in args.only.split(",")):
            continue
        if args.quick:
            cfg = {**cfg, "fa_rows": 10_000}
        results[name] = bench(name, cfg, 3 if args.quick else args.seeds, pop)
    body = report(results, args.ert, time.perf_counter() - start)
    print(body)
    if not args.quick and not args.only:
        write_section("drift", body)


if __name__ == "__main__":
    main()
