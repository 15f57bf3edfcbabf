"""The scenario space: named, bounded parameters and the unit-cube mapping samplers use."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engage.data.simulator import SCENARIO_SPACE, Parameter, Scenario


def test_every_parameter_is_documented_with_a_sane_range() -> None:
    names = [p.name for p in SCENARIO_SPACE]

    assert len(set(names)) == len(names)
    for p in SCENARIO_SPACE:
        assert isinstance(p, Parameter)
        assert p.kind in ("float", "int")
        assert p.low < p.high, p.name
        assert p.low <= p.default <= p.high, p.name
        assert p.doc.strip(), p.name
    for needed in ("household_size", "insulation", "outdoor_mean", "heating_setpoint",
                   "sensor_noise", "dropout_rate", "fault_rate", "guest_rate"):  # fmt: skip
        assert needed in names


def test_parameter_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SCENARIO_SPACE[0].low = 0  # type: ignore[misc]


def test_scenario_fills_defaults_and_reads_like_a_mapping() -> None:
    sc = Scenario(insulation=0.9)

    assert sc["insulation"] == 0.9
    assert len(sc) == len(SCENARIO_SPACE)
    assert sc["household_size"] == 2
    assert isinstance(sc["household_size"], int)
    assert dict(sc) == sc.as_dict()
    assert Scenario({"insulation": 0.9}) == sc
    assert hash(Scenario(insulation=0.9)) == hash(sc)


def test_unknown_name_is_refused_naming_it_and_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"'insulaton'.*valid: household_size"):
        Scenario(insulaton=0.5)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"insulation": 1.5}, r"'insulation' = 1.5 is outside its range \[0, 1\]"),
        ({"household_size": 0}, r"'household_size' = 0 is outside its range \[1, 6\]"),
        ({"household_size": 2.5}, r"'household_size' = 2.5 must be a whole number"),
        ({"fault_rate": "high"}, r"'fault_rate' = 'high' is not a number"),
    ],
)
def test_out_of_range_value_names_the_parameter_and_range(values, message) -> None:
    with pytest.raises(ValueError, match=message):
        Scenario(values)


def test_unit_cube_round_trips() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        u = rng.random(len(SCENARIO_SPACE))
        sc = Scenario.from_unit(u)
        back = sc.to_unit()
        for p, a, b in zip(SCENARIO_SPACE, u, back, strict=True):
            # int parameters round to the nearest whole value: within half a step
            tol = 0.5 / (p.high - p.low) + 1e-12 if p.kind == "int" else 1e-12
            assert abs(a - b) <= tol, p.name
        np.testing.assert_allclose(Scenario.from_unit(back).to_unit(), back, atol=1e-12)


def test_unit_corners_are_the_range_ends() -> None:
    low, high = (
        Scenario.from_unit(np.zeros(len(SCENARIO_SPACE))),
        Scenario.from_unit(np.ones(len(SCENARIO_SPACE))),
    )

    assert all(low[p.name] == p.low and high[p.name] == p.high for p in SCENARIO_SPACE)


@pytest.mark.parametrize("u", [np.zeros(3), np.full(len(SCENARIO_SPACE), 1.2)])
def test_bad_unit_point_is_refused(u: np.ndarray) -> None:
    with pytest.raises(ValueError, match="unit point"):
        Scenario.from_unit(u)
