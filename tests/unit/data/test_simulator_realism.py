"""Realism of the simulator, asserted: cycles, memory, cross-sensor ties, faults, ranges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engage.data.simulator import ACTIVITIES, COLUMNS, SCENARIO_SPACE, Scenario, simulate
from engage.data.simulator.faults import DRIFT_PER_DAY

ARGS = {"households": 4, "days": 7, "seed": 0}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return simulate(None, **ARGS)


def _autocorrelation(x: np.ndarray, lag: int) -> float:
    x = x - x.mean()
    return float((x[:-lag] * x[lag:]).sum() / (x * x).sum())


def test_layout_and_types(frame: pd.DataFrame) -> None:
    assert tuple(frame.columns) == COLUMNS
    assert len(frame) == 4 * 7 * 1440
    assert sorted(frame["household"].unique()) == ["h00", "h01", "h02", "h03"]
    one = frame[frame["household"] == "h01"]["timestamp"]
    assert one.iloc[0] == pd.Timestamp("2026-01-05")
    assert (one.diff().dropna() == pd.Timedelta(minutes=1)).all()
    assert frame["motion"].dtype == np.int64
    assert frame["occupied"].dtype == np.int64
    for column in ("motion", "motion_kitchen", "motion_bedroom", "door", "window", "occupied"):
        assert set(frame[column].unique()) <= {0, 1}, column
    assert set(frame["activity"].unique()) <= set(range(len(ACTIVITIES)))


def test_deterministic_by_scenario_and_seed(frame: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(frame, simulate(Scenario(), **ARGS), check_exact=True)
    other = simulate(None, **{**ARGS, "seed": 1})
    assert not np.array_equal(frame["co2"].to_numpy(), other["co2"].to_numpy())
    warmer = simulate({"outdoor_mean": 15.0}, **ARGS)
    assert not np.array_equal(frame["heating"].to_numpy(), warmer["heating"].to_numpy())


def test_diurnal_cycles(frame: pd.DataFrame) -> None:
    by_hour = frame.groupby(frame["timestamp"].dt.hour)
    outdoor = by_hour["outdoor_temperature"].mean()
    assert 13 <= outdoor.idxmax() <= 16
    assert 2 <= outdoor.idxmin() <= 6
    occupied = by_hour["occupied"].mean()
    assert occupied.loc[[1, 2, 3]].min() > 0.95
    assert occupied.loc[[11, 12, 13, 14]].mean() < 0.7
    light = by_hour["light"].mean()
    assert light.loc[[1, 2, 3]].max() < 50
    assert light.loc[[12, 20]].min() > 150
    bedroom = by_hour["co2_bedroom"].mean()
    assert bedroom.loc[[4, 5]].mean() > bedroom.loc[[14, 15]].mean() + 200


def test_autocorrelation(frame: pd.DataFrame) -> None:
    one = frame[frame["household"] == "h00"]
    for column in ("temperature", "co2", "co2_bedroom", "light"):
        assert _autocorrelation(one[column].to_numpy(), 1) > 0.95, column
        assert _autocorrelation(one[column].to_numpy(), 60) > 0.5, column
    power = one["power"].to_numpy()
    assert _autocorrelation(power, 1) > 0.5 > _autocorrelation(power, 60)


def test_co2_follows_occupancy(frame: pd.DataFrame) -> None:
    assert frame["co2"].corr(frame["occupants"].astype(float)) > 0.25
    awake_home = frame["activity"].isin([2, 3, 4, 5])
    away = frame["activity"] == 0
    assert frame.loc[awake_home, "co2"].mean() > frame.loc[away, "co2"].mean() + 100
    assert frame.loc[away, "co2"].quantile(0.1) < 470


def test_power_follows_activity(frame: pd.DataFrame) -> None:
    power = frame.groupby("activity")["power"].mean()
    away, asleep, home, cooking = (power.loc[i] for i in (0, 1, 2, 3))
    assert cooking > 3 * home
    assert home > 1.5 * max(away, asleep)
    stove = frame.groupby("activity")["power_stove"].mean()
    assert stove.loc[3] > 1000
    assert stove.drop(3).max() < 20


def test_showers_raise_bathroom_humidity_and_motion_needs_someone_awake(frame) -> None:
    humidity = frame.groupby("activity")["humidity_bathroom"].mean()
    assert humidity.loc[4] > humidity.loc[2] + 8
    asleep_or_away = frame["activity"].isin([0, 1])
    assert frame.loc[asleep_or_away, "motion"].sum() == 0
    assert frame.loc[frame["activity"] == 0, ["motion_kitchen", "motion_bedroom"]].sum().sum() == 0


def test_heating_follows_outdoor_temperature_day_by_day() -> None:
    f = simulate({"setback": 0.0, "front_sd": 4.0}, households=2, days=14, seed=1)
    daily = f.groupby(f["timestamp"].dt.date)[["heating", "outdoor_temperature"]].mean()
    assert daily["heating"].corr(daily["outdoor_temperature"]) < -0.8


def _hourly(f: pd.DataFrame, column: str) -> pd.Series:
    one = f.loc[f["household"] == "h00", column].to_numpy()
    return pd.Series(one.reshape(-1, 60).mean(axis=1))


def test_indoor_follows_outdoor_with_a_lag_when_unheated_and_insulation_damps_it() -> None:
    summer = {"heating_setpoint": 16.0, "setback": 0.0, "outdoor_mean": 22.0,
              "seasonal_amplitude": 0.0, "diurnal_amplitude": 6.0}  # fmt: skip
    swing = {}
    for insulation in (0.0, 1.0):
        f = simulate({**summer, "insulation": insulation}, households=2, days=5, seed=2)
        assert f["heating"].mean() < 50
        indoor, outdoor = _hourly(f, "temperature"), _hourly(f, "outdoor_temperature")
        by_lag = [indoor.corr(outdoor.shift(lag)) for lag in range(8)]
        if insulation == 0.0:  # a leaky house follows the outdoor air a few hours late
            assert max(by_lag) > 0.7
            assert int(np.argmax(by_lag)) >= 1
        hourly = f.groupby(f["timestamp"].dt.hour)["temperature"].mean()
        swing[insulation] = hourly.max() - hourly.min()
    assert swing[0.0] > 1.5 * swing[1.0]


def test_insulation_saves_heating_energy() -> None:
    leaky = simulate({"insulation": 0.0}, households=2, days=3, seed=0)["heating"].mean()
    tight = simulate({"insulation": 1.0}, households=2, days=3, seed=0)["heating"].mean()
    assert tight < 0.5 * leaky


def test_fault_signatures() -> None:
    clean = simulate({"fault_rate": 0.0}, households=6, days=3, seed=5)
    faulty = simulate({"fault_rate": 1.0}, households=6, days=3, seed=5)
    sensors = list(DRIFT_PER_DAY)
    # Faults change only the faulty-capable sensors and only where the label says so.
    same = [c for c in COLUMNS if c not in (*sensors, "fault")]
    pd.testing.assert_frame_equal(clean[same], faulty[same])
    healthy = faulty["fault"] == 0
    assert (clean.loc[healthy, sensors] == faulty.loc[healthy, sensors]).all().all()
    assert set(faulty["fault"].unique()) == {0, 2, 3}
    # Drift: the gap to the clean reading grows with time since onset.
    gap = (faulty[sensors] - clean[sensors]).abs().max(axis=1)
    drift = faulty["fault"] == 2
    assert gap[drift].iloc[-100:].mean() > gap[drift].iloc[:100].mean()
    # Stuck-at: some sensor repeats one value minute after minute.
    flat = (faulty.groupby("household")[sensors].diff() == 0).any(axis=1)
    assert flat[faulty["fault"] == 3].mean() > 0.95
    assert flat[healthy].mean() < flat[faulty["fault"] == 3].mean()


def test_dropouts_are_nan_bursts_labelled_as_faults() -> None:
    f = simulate({"dropout_rate": 0.05}, households=3, days=4, seed=3)
    lost = f[["temperature", "co2", "power", "light"]].isna()
    assert 0.025 < lost.to_numpy().mean() < 0.1
    assert (f.loc[lost.any(axis=1), "fault"] >= 1).all()
    column = lost["co2"].to_numpy().astype(int)
    starts = np.count_nonzero(np.diff(column) == 1)
    assert column.sum() / max(starts, 1) >= 5  # bursts, not scattered single minutes


@pytest.mark.parametrize("corner", [0.0, 1.0])
def test_readings_stay_in_physical_ranges_at_the_corners(corner: float) -> None:
    u = np.full(len(SCENARIO_SPACE), corner)
    f = simulate(Scenario.from_unit(u), households=2, days=2, seed=4)
    bounds = {"temperature": (-30, 45), "humidity": (5, 100), "humidity_bathroom": (5, 100),
              "co2": (100, 5000), "co2_bedroom": (100, 5000), "power": (0, 20_000),
              "light": (0, 100_000), "heating": (0, 30_000)}  # fmt: skip
    healthy = f["fault"] == 0  # a drifting sensor may read anything: that is its fault
    for column, (low, high) in bounds.items():
        values = f.loc[healthy, column]
        assert len(values) > 0, column
        assert values.between(low, high).all(), column


def test_every_parameter_changes_the_simulation() -> None:
    base = {"fault_rate": 0.5, "dropout_rate": 0.05, "guest_rate": 0.5, "window_rate": 0.5}
    for p in SCENARIO_SPACE:
        low = simulate({**base, p.name: p.low}, households=3, days=2, seed=6)
        high = simulate({**base, p.name: p.high}, households=3, days=2, seed=6)
        assert not low.equals(high), p.name
