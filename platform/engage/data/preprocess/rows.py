"""Row operators: resampling each series onto a regular time grid, filling its gaps.

They run on the validated table (sorted by group then time) before it is windowed, so
they are data cleaning rather than part of the model: serving still receives windows of
regular rows. The arithmetic is torch on a ``(rows, features)`` tensor per group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from engage.data.preprocess.base import Operator, OperatorParams, State, register_operator

if TYPE_CHECKING:
    import torch


class ResampleParams(OperatorParams):
    """The grid step and how rows missing from the grid are filled."""

    every: str = Field(description="grid step as a pandas offset, e.g. 1min, 5min, 1h")
    fill: Literal["linear", "ffill"] = Field(
        "linear", description="linear interpolation in time, or the last reading carried"
    )

    @field_validator("every")
    @classmethod
    def _offset(cls, v: str) -> str:
        try:
            step = pd.Timedelta(pd.tseries.frequencies.to_offset(v))
        except (ValueError, TypeError):
            raise ValueError(f"{v!r} is not a time step such as 1min, 5min or 1h") from None
        if step <= pd.Timedelta(0):
            raise ValueError(f"{v!r} must be a positive time step")
        return v


def _positions(times: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Index of the last reading at or before each grid time (the grid starts at times[0])."""
    import torch

    return (torch.searchsorted(times, grid, right=True) - 1).clamp(min=0)


def resample_values(
    times: torch.Tensor, values: torch.Tensor, grid: torch.Tensor, fill: str
) -> torch.Tensor:
    """Values of one series at the ``grid`` times.

    Parameters
    ----------
    times : torch.Tensor
        int64 nanoseconds, strictly increasing, shape ``(n,)``.
    values : torch.Tensor
        float64, shape ``(n, features)``.
    grid : torch.Tensor
        int64 nanoseconds within ``[times[0], times[-1]]``.
    fill : str
        ``"linear"`` (interpolate in time) or ``"ffill"`` (last reading).
    """
    left = _positions(times, grid)
    if fill == "ffill" or len(times) == 1:
        return values[left]
    left = left.clamp(max=len(times) - 2)
    span = (times[left + 1] - times[left]).double()
    weight = ((grid - times[left]).double() / span).unsqueeze(1)
    return values[left] + weight * (values[left + 1] - values[left])


@register_operator
class Resample(Operator):
    """Put every series on a regular grid of step ``every``; missing rows are filled.

    Row-level: it runs on the table, not on windows. Features are interpolated (``linear``)
    or carried forward (``ffill``); the target and the group are carried forward. Matches
    pandas' ``reindex`` + ``interpolate(method="time")`` (or ``reindex(method="ffill")``).
    """

    name = "resample"
    Params = ResampleParams
    level = "row"

    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Not used on windows: resampling is row-level (see :meth:`apply_rows`)."""
        return x

    def time_span(self, first: int, last: int) -> tuple[int, int]:
        """The grid starts at the first reading and ends at its last step before ``last``."""
        step = pd.Timedelta(pd.tseries.frequencies.to_offset(self.params.every)).value
        return first, first + (last - first) // step * step

    def apply_rows(
        self, frame: pd.DataFrame, time: str, group: str | None, features: list[str]
    ) -> pd.DataFrame:
        """The validated ``frame`` resampled group by group, same columns, fresh index."""
        step = pd.Timedelta(pd.tseries.frequencies.to_offset(self.params.every)).value
        parts = [frame] if group is None else [g for _, g in frame.groupby(group, sort=False)]
        return pd.concat([self._one(p, time, features, step) for p in parts], ignore_index=True)

    def _one(self, part: pd.DataFrame, time: str, features: list[str], step: int) -> pd.DataFrame:
        import torch

        times = torch.from_numpy(part[time].to_numpy(dtype="datetime64[ns]").view(np.int64).copy())
        grid = torch.arange(int(times[0]), int(times[-1]) + 1, step, dtype=torch.int64)
        values = torch.from_numpy(part[features].to_numpy(dtype=np.float64))
        filled = resample_values(times, values, grid, self.params.fill).numpy()
        carried = part.iloc[_positions(times, grid).numpy()].reset_index(drop=True)
        carried[time] = grid.numpy().view("datetime64[ns]")
        carried[features] = filled
        return carried[list(part.columns)]
