"""What ``engage plan`` reads from its command line: bandwidths, durations, worker ranges and
the named device profiles, each parsed once with one clear message when it is wrong.

A device profile's figures are assumptions a user can override (``--price``, a numeric
``--device`` speed): peak dense fp32 throughput from the vendors' data sheets, the memory of
the common model, and an illustrative on-demand price per device-hour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engage.errors import SpecError
from engage.registry import Registry


class PlanInputError(SpecError):
    """An ``engage plan`` option is invalid (exit code 2, like any other bad input)."""

    headline = "invalid plan option"


@dataclass(frozen=True)
class DeviceProfile:
    """One kind of worker device.

    ``tflops`` is the peak dense fp32 rate (None: the calibration machine itself, speed 1);
    ``utilisation`` the share of it a training step reaches; ``memory_gib`` per device;
    ``price`` per device-hour in dollars; ``step_floor`` the least seconds one step takes
    (a GPU step of a small model is bound by launching its kernels from Python, ~1-3 ms).
    """

    name: str
    tflops: float | None
    memory_gib: float
    price: float
    utilisation: float = 0.4
    description: str = ""
    step_floor: float = 0.002


DEVICE_PROFILES: Registry[DeviceProfile] = Registry("device profile", PlanInputError)
"""Named devices ``--device`` accepts; an unknown name lists the valid ones (exit 2)."""

for _profile in (
    DeviceProfile("cpu", None, 16.0, 0.05, 1.0, "one core of the calibrating machine", 0.0),
    DeviceProfile("t4", 8.1, 16.0, 0.35, description="NVIDIA T4"),
    DeviceProfile("v100", 15.7, 32.0, 1.50, description="NVIDIA V100 SXM2"),
    DeviceProfile("a100", 19.5, 80.0, 2.50, description="NVIDIA A100 80 GB"),
    DeviceProfile("h100", 67.0, 80.0, 4.00, description="NVIDIA H100 SXM"),
):
    DEVICE_PROFILES.add(_profile, _profile.name)

_RATE_UNITS = {
    "bps": 1 / 8,
    "kbps": 1e3 / 8,
    "mbps": 1e6 / 8,
    "gbps": 1e9 / 8,
    "tbps": 1e12 / 8,
    "b/s": 1.0,
    "kb/s": 1e3,
    "mb/s": 1e6,
    "gb/s": 1e9,
    "tb/s": 1e12,
}
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER = r"(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"


def parse_bandwidth(text: str) -> float:
    """Bytes per second from ``100Gbps`` (bits) or ``12.5GB/s`` (bytes); case-insensitive.

    Raises
    ------
    PlanInputError
        If the text is not a positive number with one of the units.
    """
    m = re.fullmatch(_NUMBER + r"\s*([A-Za-z/]+)", text.strip())
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _RATE_UNITS or float(m.group(1)) <= 0:
        raise PlanInputError(
            f"--bandwidth {text!r} is not a bandwidth",
            hint="write a positive number and a unit, e.g. 100Gbps, 25Gbps or 12.5GB/s",
        )
    # Units are matched lower-case; "GB/s" and "Gbps" differ by the slash, not the case.
    return float(m.group(1)) * _RATE_UNITS[unit]


def parse_duration(text: str, option: str = "--deadline") -> float:
    """Seconds from ``90s``, ``30m``, ``2h``, ``1.5d`` or a bare number of hours.

    Raises
    ------
    PlanInputError
        If the text is not a positive duration.
    """
    m = re.fullmatch(_NUMBER + r"\s*([a-z]*)", text.strip().lower())
    unit = (m.group(2) or "h") if m else ""
    if not m or unit not in _DURATION_UNITS or float(m.group(1)) <= 0:
        raise PlanInputError(
            f"{option} {text!r} is not a duration",
            hint="write a positive number with s, m, h or d, e.g. 2h or 90m",
        )
    return float(m.group(1)) * _DURATION_UNITS[unit]


def parse_workers(text: str) -> list[int]:
    """Worker counts from ``1..256`` (powers of two between the ends, and the ends) or
    ``1,2,8``.

    Raises
    ------
    PlanInputError
        If a count is not a whole number of at least 1, or the range runs backwards.
    """
    try:
        if ".." in text:
            lo, hi = (int(p) for p in text.split("..", 1))
            counts = {lo, hi} | {2**k for k in range(0, 31) if lo <= 2**k <= hi}
        else:
            counts = {int(p) for p in text.split(",")}
            lo, hi = min(counts), max(counts)
    except ValueError:
        counts, lo, hi = set(), 0, 0
    if not counts or lo < 1 or hi < lo:
        raise PlanInputError(
            f"--workers {text!r} is not a worker range",
            hint="write LOW..HIGH with 1 <= LOW <= HIGH (e.g. 1..256) or a list such as 1,2,8",
        )
    return sorted(counts)


def resolve_device(text: str) -> tuple[DeviceProfile, float | None]:
    """The profile ``--device`` names, or the ``cpu`` profile with a numeric speed factor.

    Returns the profile and the speed factor given (None for a named profile, whose speed
    the plan works out from the model's FLOPs).

    Raises
    ------
    PlanInputError
        If the text is neither a positive number nor a profile name.
    """
    try:
        speed = float(text)
    except ValueError:
        return DEVICE_PROFILES.get(text.lower()), None
    if not speed > 0:
        raise PlanInputError(
            f"--device {text!r}: a speed factor must be > 0",
            hint=f"or name a profile: {', '.join(DEVICE_PROFILES.names())}",
        )
    return DEVICE_PROFILES.get("cpu"), speed
