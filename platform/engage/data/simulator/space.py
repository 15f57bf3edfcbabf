"""The scenario parameter space: every variation of the simulator is a named, bounded parameter.

A point of the space is a :class:`Scenario`. Samplers (uniform, Latin hypercube, adaptive)
work on the unit cube ``[0, 1]^d``; :meth:`Scenario.from_unit` and :meth:`Scenario.to_unit`
map between the cube and the parameters' documented ranges, so a sampler never needs to
know what a parameter means.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Parameter:
    """One dimension of the scenario space.

    Attributes
    ----------
    name : str
        The key in a :class:`Scenario`.
    low, high : float
        The documented range, both ends included.
    default : float
        The value a scenario takes when it does not name this parameter.
    kind : {"float", "int"}
        ``"int"`` values are whole numbers (``from_unit`` rounds).
    doc : str
        What the parameter changes, with its unit.
    """

    name: str
    low: float
    high: float
    default: float
    kind: Literal["float", "int"]
    doc: str

    def check(self, value: float) -> float:
        """Return ``value`` as this parameter's type.

        Raises
        ------
        ValueError
            If ``value`` is not a number, is outside ``[low, high]``, or is fractional for
            an ``"int"`` parameter; the message names the parameter and its range.
        """
        where = f"scenario parameter {self.name!r} = {value!r}"
        span = f"[{self.low:g}, {self.high:g}]"
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where} is not a number; expected one in {span}") from None
        if not self.low <= number <= self.high:
            raise ValueError(f"{where} is outside its range {span}")
        if self.kind == "int":
            if number != round(number):
                raise ValueError(f"{where} must be a whole number in {span}")
            return round(number)
        return number


SCENARIO_SPACE: tuple[Parameter, ...] = (
    Parameter("household_size", 1, 6, 2, "int", "residents per household"),
    Parameter("commuter_share", 0.0, 1.0, 0.75, "float", "chance a household works away on weekdays"),
    Parameter("holiday_rate", 0.0, 0.2, 0.03, "float", "chance per day that a household is away all day"),
    Parameter("guest_rate", 0.0, 0.6, 0.1, "float", "chance per evening of 1-4 guests for 2-5 hours"),
    Parameter("cooking_rate", 0.0, 1.0, 0.8, "float", "chance per day of cooking dinner at home"),
    Parameter("outdoor_mean", -10.0, 25.0, 10.0, "float", "yearly mean outdoor temperature, degC"),
    Parameter("seasonal_amplitude", 0.0, 15.0, 8.0, "float", "half the summer-winter swing, degC"),
    Parameter("diurnal_amplitude", 0.0, 8.0, 4.0, "float", "half the day-night swing, degC"),
    Parameter("front_sd", 0.0, 6.0, 2.5, "float", "sd of the day-to-day weather fronts, degC"),
    Parameter("insulation", 0.0, 1.0, 0.5, "float", "0 = leaky (time constant 10 h), 1 = passive house (100 h)"),
    Parameter("heating_setpoint", 16.0, 24.0, 21.0, "float", "thermostat when awake at home, degC"),
    Parameter("setback", 0.0, 6.0, 3.0, "float", "thermostat drop at night and when away, degC"),
    Parameter("ventilation", 0.2, 2.0, 0.6, "float", "air changes per hour with windows shut"),
    Parameter("window_rate", 0.0, 1.0, 0.3, "float", "chance per day of airing with a window open"),
    Parameter("appliance_scale", 0.5, 2.0, 1.0, "float", "multiplier on every appliance's power"),
    Parameter("sensor_noise", 0.0, 5.0, 1.0, "float", "multiplier on every sensor's noise sd"),
    Parameter("dropout_rate", 0.0, 0.2, 0.0, "float", "share of readings lost (NaN), in bursts"),
    Parameter("fault_rate", 0.0, 1.0, 0.0, "float", "chance per household and sensor of a drift or stuck-at fault"),
)  # fmt: skip
"""Every parameter of the simulator with its documented range (see docs/simulator.md)."""

_BY_NAME = {p.name: p for p in SCENARIO_SPACE}


class Scenario(Mapping[str, float]):
    """One point of :data:`SCENARIO_SPACE`: parameter name to value, defaults filled in.

    Parameters
    ----------
    values : Mapping[str, float], optional
        Values for some parameters; the others take their defaults. Keyword arguments
        are merged over ``values``.

    Raises
    ------
    ValueError
        If a name is not a parameter (the message lists the valid names) or a value is
        outside its parameter's range (the message names the parameter and its range).
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, float] | None = None, **more: float) -> None:
        given = {**(values or {}), **more}
        unknown = sorted(set(given) - set(_BY_NAME))
        if unknown:
            raise ValueError(
                f"unknown scenario parameter(s) {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(_BY_NAME)}"
            )
        self._values = {
            p.name: p.check(given[p.name]) if p.name in given else p.check(p.default)
            for p in SCENARIO_SPACE
        }

    def __getitem__(self, name: str) -> float:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != _BY_NAME[k].default}
        return f"Scenario({changed!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scenario) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.values()))

    @classmethod
    def from_unit(cls, u: np.ndarray) -> Scenario:
        """Map a point of ``[0, 1]^d`` (in :data:`SCENARIO_SPACE` order) to a scenario.

        Raises
        ------
        ValueError
            If ``u`` does not have ``d`` entries or any entry is outside ``[0, 1]``.
        """
        point = np.asarray(u, dtype=float).ravel()
        if point.shape != (len(SCENARIO_SPACE),):
            raise ValueError(f"a unit point needs {len(SCENARIO_SPACE)} entries, got {point.size}")
        if not np.all((point >= 0.0) & (point <= 1.0)):
            raise ValueError(f"unit point entries must lie in [0, 1], got {point.tolist()}")
        values = {}
        for p, x in zip(SCENARIO_SPACE, point, strict=True):
            value = p.low + float(x) * (p.high - p.low)
            values[p.name] = round(value) if p.kind == "int" else min(max(value, p.low), p.high)
        return cls(values)

    def to_unit(self) -> np.ndarray:
        """This scenario as a point of ``[0, 1]^d`` (the inverse of :meth:`from_unit`)."""
        return np.array([(self._values[p.name] - p.low) / (p.high - p.low) for p in SCENARIO_SPACE])

    def as_dict(self) -> dict[str, float]:
        """A plain ``{name: value}`` copy, for specs, tracking and JSON."""
        return dict(self._values)
