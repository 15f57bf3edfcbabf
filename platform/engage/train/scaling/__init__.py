"""The scaling plan: predict how a data-parallel job scales, what it costs, and how it fits.

:mod:`~engage.train.scaling.model` is the analytic model of a DDP step (compute, ring
all-reduce, overlap); :mod:`~engage.train.scaling.calibrate` and
:mod:`~engage.train.scaling.netprobe` measure its inputs here (one worker's step; all-reduce and
DDP steps on Ray); :mod:`~engage.train.scaling.memory` estimates per-worker memory on the meta
device; :mod:`~engage.train.scaling.plan` turns all of it into a plan and
:mod:`~engage.train.scaling.plot` draws it. ``engage plan`` is the command.

Importing this package imports neither torch nor Ray.
"""

from engage.train.scaling.inputs import (
    DEVICE_PROFILES,
    DeviceProfile,
    PlanInputError,
    parse_bandwidth,
    parse_duration,
    parse_workers,
    resolve_device,
)
from engage.train.scaling.model import Network, ScalingModel, StepProfile, ring_allreduce_seconds

__all__ = [
    "DEVICE_PROFILES",
    "DeviceProfile",
    "Network",
    "PlanInputError",
    "ScalingModel",
    "StepProfile",
    "parse_bandwidth",
    "parse_duration",
    "parse_workers",
    "resolve_device",
    "ring_allreduce_seconds",
]
