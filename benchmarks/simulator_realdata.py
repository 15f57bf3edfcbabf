"""Side-by-side summary statistics: the simulator against a real indoor-sensor data set.

Real data: the UCI "Occupancy Detection" data (Candanedo & Feldheim 2016, an office room
in Mons, Belgium, February 2015), as shipped inside the PyPI package ``river`` (BSD-3; a
dev dependency of engage) at ``river/drift/datasets/occupancy.csv``: temperature (V1,
degC), relative humidity (V2, %), light (V3, lux) and CO2 (V4, ppm), one reading every 16
minutes, 509 rows. Nothing is downloaded.

Simulated: the default scenario over the same calendar days (from 2015-02-04), 8 homes,
read every 16 minutes like the real set. The table goes into docs/simulator.md between
the ``realdata`` markers.

Usage: ``python benchmarks/simulator_realdata.py [--no-write]``
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd

from engage.data.simulator import simulate

DOC = Path(__file__).resolve().parents[1] / "docs" / "simulator.md"
SENSORS = {"temperature": "V1", "humidity": "V2", "light": "V3", "co2": "V4"}


def real() -> pd.DataFrame:
    """The occupancy data river ships, with engage's column names."""
    from river.drift.datasets import Occupancy

    raw = pd.read_csv(Occupancy().path, parse_dates=["time"])
    return raw.rename(columns={v: k for k, v in SENSORS.items()} | {"time": "timestamp"})


def simulated(households: int, seed: int) -> pd.DataFrame:
    """Default scenario over the real set's days, every 16th minute of each home."""
    frame = simulate(None, households=households, days=7, seed=seed, start="2015-02-04")
    return frame[frame.groupby("household").cumcount() % 16 == 0]


def stats(frame: pd.DataFrame, groups: str | None) -> pd.DataFrame:
    """Per sensor: mean, sd, 5/50/95 % quantiles, lag-1 autocorrelation, diurnal swing."""
    rows = {}
    for name in SENSORS:
        x = frame[name].astype(float)
        parts = [g[name].to_numpy() for _, g in frame.groupby(groups)] if groups else [x.to_numpy()]
        lag1 = np.mean([np.corrcoef(p[:-1], p[1:])[0, 1] for p in parts if p.std() > 0])
        hourly = x.groupby(frame["timestamp"].dt.hour).mean()
        rows[name] = {
            "mean": x.mean(), "sd": x.std(), "p5": x.quantile(0.05), "p50": x.median(),
            "p95": x.quantile(0.95), "lag-1 autocorr. (16 min)": lag1,
            "diurnal swing (hourly means)": hourly.max() - hourly.min(),
        }  # fmt: skip
    corr = frame["co2"].corr(frame["light"])
    return pd.DataFrame(rows).T.assign(**{"corr(CO2, light)": corr})


def render(r: pd.DataFrame, s: pd.DataFrame, n_real: int, n_sim: int) -> str:
    """A markdown table, real and simulated side by side per sensor and statistic."""
    lines = ["| sensor | statistic | real (UCI occupancy, office) | simulated (default scenario, homes) |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    for name in SENSORS:
        for stat in r.columns[:-1]:
            lines.append(f"| {name} | {stat} | {r.loc[name, stat]:.2f} | {s.loc[name, stat]:.2f} |")
    lines.append(f"| co2 & light | correlation | {r.iloc[0, -1]:.2f} | {s.iloc[0, -1]:.2f} |")
    lines.append(f"\nRows: {n_real} real, {n_sim} simulated. Command: "
                 "`python benchmarks/simulator_realdata.py`.")  # fmt: skip
    return "\n".join(lines)


def write(text: str) -> None:
    """Replace the ``realdata`` section of docs/simulator.md."""
    start, end = "<!-- realdata:start -->", "<!-- realdata:end -->"
    doc = DOC.read_text()
    block = f"{start}\n{text.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    DOC.write_text(
        pattern.sub(lambda _: block, doc) if pattern.search(doc) else f"{doc}\n{block}\n"
    )


def main() -> int:
    """Compute, print and (unless --no-write) write the side-by-side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--households", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    r, s = real(), simulated(args.households, args.seed)
    text = render(stats(r, None), stats(s, "household"), len(r), len(s))
    print(text)
    if not args.no_write:
        write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
