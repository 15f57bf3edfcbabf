"""Indoor temperature from a one-node RC model driven by the weather, with heating control.

    T[t] = T[t-1] + a[t] (T_out[t] - T[t-1]) + k[t] (S[t] - T[t-1]) + g[t]

``a`` is the loss rate (1 / time constant, more with a window open), ``S`` the thermostat's
schedule (setpoint when awake at home, set back at night and when away), ``k`` the
controller's gain and ``g`` the internal gains of people and appliances. A heater only
heats and has a maximum power: each pass finds the minutes where the controller would be
off (it would cool), proportional, or saturated at full power, and the next pass solves
the model with those modes (an active-set iteration; each pass is linear). The linear recurrence is solved in closed form (:func:`recur`), vectorised.
"""

from __future__ import annotations

import numpy as np

from engage.data.simulator.routines import Routine
from engage.data.simulator.space import Scenario

_GAIN = 1 / 20  # controller gain per minute: a heater closes 5 % of the gap each minute
_WINDOW_LOSS = 1 / 40  # an open window adds this loss rate per minute
_PASSES = 3  # active-set passes: enough for the heater state to settle (tests check it)


def recur(a: np.ndarray, b: np.ndarray, x0: np.ndarray, chunk: int = 240) -> np.ndarray:
    """Solve ``x[t] = a[t] * x[t-1] + b[t]`` along the last axis, with ``x[-1] = x0``.

    The closed form ``x = P * (x0 + cumsum(b / P))`` with ``P = cumprod(a)`` is evaluated
    in chunks because ``P`` underflows over long series; with ``a > 0.5`` a chunk of 240
    stays far above the smallest float64.

    Parameters
    ----------
    a, b : numpy.ndarray
        Shape (H, N); ``a`` may broadcast against ``b``.
    x0 : numpy.ndarray
        Shape (H,): the state before the first step.
    """
    a = np.broadcast_to(a, b.shape)
    out = np.empty_like(b)
    x = x0
    for s in range(0, b.shape[-1], chunk):
        p = np.cumprod(a[..., s : s + chunk], axis=-1)
        out[..., s : s + chunk] = p * (x[..., None] + np.cumsum(b[..., s : s + chunk] / p, axis=-1))
        x = out[..., min(s + chunk, b.shape[-1]) - 1]
    return out


def house_constants(scenario: Scenario) -> tuple[float, float]:
    """Heat-loss coefficient UA (W/K) and heat capacity C (J/K) from ``insulation``."""
    ins = scenario["insulation"]
    ua = 250.0 - 170.0 * ins
    tau_hours = 10.0 * 10.0**ins  # 10 h leaky .. 100 h passive house
    return ua, ua * tau_hours * 3600.0


def indoor(scenario: Scenario, rt: Routine, outdoor: np.ndarray, gains_w: np.ndarray):
    """Indoor temperature (degC) and heating power (W), each of shape (H, D * 1440).

    Parameters
    ----------
    scenario : Scenario
        Uses ``insulation``, ``heating_setpoint`` and ``setback``.
    rt : Routine
        Who is home and awake; when a window is open.
    outdoor : numpy.ndarray
        Outdoor temperature, shape (1, D, 1440).
    gains_w : numpy.ndarray
        Internal gains in W (people, appliances, stove), shape (H, D, 1440).
    """
    ua, cap = house_constants(scenario)
    h = rt.home.shape[0]
    flat = (h, -1)
    setpoint = scenario["heating_setpoint"]
    target = np.where(rt.awake, setpoint, setpoint - scenario["setback"]).reshape(flat)
    loss = (ua * 60.0 / cap + _WINDOW_LOSS * rt.window_open).reshape(flat)
    t_out = np.broadcast_to(outdoor, rt.home.shape).reshape(flat)
    gain = (gains_w * (60.0 / cap)).reshape(flat)
    # Start at the first day's steady state: heated to the setpoint, or free-floating
    # above the outdoor mean by the internal gains when that is warmer.
    free = t_out[:, :1440].mean(axis=1) + gains_w.reshape(flat)[:, :1440].mean(axis=1) / ua
    x0 = np.maximum(target[:, 0], free)
    # Heater sized at 1.5 times the design load (indoor setpoint against -12 degC outside).
    qmax = 1.5 * ua * (setpoint + 12.0) * 60.0 / cap  # degC per minute at full power
    k, full = np.full(target.shape, _GAIN), np.zeros(target.shape)
    for _ in range(_PASSES):  # each pass: off, proportional or full power as the last found
        temp = recur(1.0 - loss - k, loss * t_out + k * target + full + gain, x0)
        before = np.concatenate([x0[:, None], temp[:, :-1]], axis=1)
        heat = k * (target - before) + full
        want = _GAIN * (target - before)
        k = np.where((want > 0.0) & (want < qmax), _GAIN, 0.0)
        full = np.where(want >= qmax, qmax, 0.0)
    return temp, cap * np.clip(heat, 0.0, qmax) / 60.0
