"""Window operators: clipping, rolling and lag features, spectral features.

Each works on a ``(batch, window, features)`` float tensor with torch operations only, so it
runs where the tensor lives (CPU or GPU). They see the windows the model sees: standardised
when ``data.normalize`` is true. Rolling and lag features look back inside the window only,
so a served raw window yields exactly the features training saw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from engage.data.preprocess.base import (
    Operator,
    OperatorParams,
    PartFit,
    State,
    register_operator,
)

if TYPE_CHECKING:
    import torch


class ClipParams(OperatorParams):
    """Fixed bounds (``low``, ``high``) or per-feature train quantiles (``quantile``)."""

    low: float | None = Field(None, description="values below become low")
    high: float | None = Field(None, description="values above become high")
    quantile: float | None = Field(
        None, gt=0.0, lt=0.5, description="clip to the train split's [q, 1-q] quantiles"
    )

    @model_validator(mode="after")
    def _one_way(self) -> ClipParams:
        fixed = self.low is not None or self.high is not None
        if fixed == (self.quantile is not None):
            raise ValueError("give low and/or high, or quantile, not both and not neither")
        if self.low is not None and self.high is not None and self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


@register_operator
class Clip(Operator):
    """Clip every value to fixed bounds or to the train split's per-feature quantiles."""

    name = "clip"
    Params = ClipParams
    fit_param = "quantile"  # exact quantiles need every training value: no fit in parts

    @property
    def needs_fit(self) -> bool:
        """True in quantile mode: the bounds come from the train split."""
        return self.params.quantile is not None

    def fit(self, x: torch.Tensor) -> State:
        """Per-feature ``low``/``high`` quantiles of the training windows (quantile mode)."""
        import torch

        q = self.params.quantile
        if q is None:
            return {}
        rows = x.reshape(-1, x.shape[-1]).double()
        levels = torch.tensor([q, 1.0 - q], dtype=torch.float64, device=x.device)
        low, high = torch.quantile(rows, levels, dim=0)
        return {"low": low.to(x.dtype), "high": high.to(x.dtype)}

    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``x`` clipped to the fitted or fixed bounds."""
        import torch

        if state:
            return torch.maximum(torch.minimum(x, state["high"]), state["low"])
        return torch.clamp(x, min=self.params.low, max=self.params.high)


Stat = Literal["mean", "std", "min", "max"]


class RollingParams(OperatorParams):
    """The trailing window length and the statistics appended as features."""

    size: int = Field(ge=2, le=10_000, description="rows in each trailing window")
    stats: list[Stat] = Field(["mean"], min_length=1, description="statistics to append")


@register_operator
class Rolling(Operator):
    """Append trailing statistics of every feature (partial windows at the start).

    Matches pandas' ``rolling(size, min_periods=1)`` per window; ``std`` uses ``ddof=0``.
    """

    name = "rolling"
    Params = RollingParams

    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``x`` with ``len(stats) * features`` more columns, stat by stat."""
        import torch

        k, window = self.params.size, x.shape[1]
        xd = x.double()
        # Trailing sums from cumulative sums (float64): O(window), whatever the size.
        count = torch.arange(1, window + 1, device=x.device).clamp(max=k).double()
        count = count.view(1, window, 1)
        mean = _trailing_sum(xd, k) / count
        out = [x]
        for stat in self.params.stats:
            if stat == "mean":
                value = mean
            elif stat == "std":
                var = _trailing_sum(xd * xd, k) / count - mean * mean
                value = torch.sqrt(var.clamp(min=0.0))
            else:
                value = _trailing_extreme(xd, k, stat)
            out.append(value.to(x.dtype))
        return torch.cat(out, dim=-1)

    def output_shape(self, window: int, features: int) -> tuple[int, int]:
        """Same window; ``features * (1 + len(stats))`` features."""
        return window, features * (1 + len(self.params.stats))


def _trailing_sum(x: torch.Tensor, k: int) -> torch.Tensor:
    """Sum of the last ``k`` rows (fewer at the start) at every row of ``x``."""
    import torch
    import torch.nn.functional as F

    total = F.pad(torch.cumsum(x, dim=1), (0, 0, 1, 0))
    ends = torch.arange(1, x.shape[1] + 1, device=x.device)
    starts = (ends - k).clamp(min=0)
    return total[:, ends] - total[:, starts]


def _trailing_extreme(x: torch.Tensor, k: int, stat: str) -> torch.Tensor:
    """Min or max of the last ``k`` rows (fewer at the start) at every row of ``x``."""
    import torch.nn.functional as F

    fill = float("inf") if stat == "min" else float("-inf")
    spans = F.pad(x, (0, 0, k - 1, 0), value=fill).unfold(1, k, 1)
    return spans.amin(-1) if stat == "min" else spans.amax(-1)


class LagParams(OperatorParams):
    """The lags, in rows; the first rows of a window repeat its first value."""

    lags: list[int] = Field(min_length=1, description="row lags to append, each >= 1")

    @model_validator(mode="after")
    def _positive(self) -> LagParams:
        bad = [lag for lag in self.lags if lag < 1]
        if bad:
            raise ValueError(f"every lag must be >= 1, got {bad}")
        return self


@register_operator
class Lag(Operator):
    """Append each feature shifted back by every lag (edge-padded with the window's first row).

    Matches pandas' ``shift(lag).bfill()`` per window.
    """

    name = "lag"
    Params = LagParams

    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``x`` with ``len(lags) * features`` more columns, lag by lag."""
        import torch

        window = x.shape[1]
        out = [x]
        for lag in self.params.lags:
            k = min(lag, window)
            head = x[:, :1].expand(-1, k, -1)
            out.append(torch.cat([head, x[:, : window - k]], dim=1))
        return torch.cat(out, dim=-1)

    def output_shape(self, window: int, features: int) -> tuple[int, int]:
        """Same window; ``features * (1 + len(lags))`` features."""
        return window, features * (1 + len(self.params.lags))


class SpectralParams(OperatorParams):
    """How many frequency bins to keep and how to scale them."""

    bins: int | None = Field(None, ge=1, description="lowest bins kept; default all")
    log: bool = Field(True, description="log1p of the magnitudes")
    append: bool = Field(True, description="keep the time rows and append the bins after them")
    standardize: bool = Field(True, description="standardise each bin with train statistics")


@register_operator
class Spectral(Operator, PartFit):
    """Magnitudes of the real FFT of each feature over the window (``torch.fft.rfft``).

    The bins become rows along the window axis: ``(batch, bins, features)``, after the time
    rows when ``append``. Matches ``numpy.abs(numpy.fft.rfft(x, axis=1))[:, :bins]``.
    """

    name = "spectral"
    Params = SpectralParams
    fit_param = "standardize"

    @property
    def needs_fit(self) -> bool:
        """True when standardising: each bin's statistics come from the train split."""
        return self.params.standardize

    def _bins(self, window: int) -> int:
        full = window // 2 + 1
        return full if self.params.bins is None else min(self.params.bins, full)

    def _magnitudes(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, bins, features)`` magnitudes (log1p when ``log``), float64.

        The transform runs along the last axis of a ``(batch, features, window)`` copy:
        contiguous series, a quarter less CPU time than along the window axis in place
        (0.69 against 0.90 ms for 32 windows of 120 x 60; the same values, bit for bit;
        the result is a transposed view).
        """
        import torch

        series = x.double().transpose(1, 2).contiguous()
        spectrum = torch.fft.rfft(series, dim=2)[..., : self._bins(x.shape[1])]
        magnitude = spectrum.abs()
        magnitude = torch.log1p(magnitude) if self.params.log else magnitude
        return magnitude.transpose(1, 2)

    def fit(self, x: torch.Tensor) -> State:
        """Mean and std of each (bin, feature) magnitude over the training windows."""
        import torch

        if not self.params.standardize:
            return {}
        m = self._magnitudes(x)
        std = m.std(dim=0, unbiased=False)
        std = torch.where(std > 0, std, torch.ones_like(std))
        return {"mean": m.mean(dim=0).to(x.dtype), "std": std.to(x.dtype)}

    def fit_part(self, x: torch.Tensor) -> State:
        """Count, mean and sum of squared deviations of each (bin, feature) magnitude (float64)."""
        import torch

        m = self._magnitudes(x)
        mean = m.mean(dim=0) if len(m) else m.new_zeros(m.shape[1:])
        n = torch.tensor(float(len(m)), dtype=torch.float64)
        return {"n": n, "mean": mean, "m2": ((m - mean) ** 2).sum(dim=0)}

    def merge_parts(self, a: State, b: State) -> State:
        """The moments of both parts' magnitudes together."""
        n = a["n"] + b["n"]
        if float(n) == 0:
            return a
        delta = b["mean"].to(a["mean"].device) - a["mean"]
        mean = a["mean"] + delta * (b["n"] / n)
        m2 = a["m2"] + b["m2"].to(a["m2"].device) + delta**2 * (a["n"] * b["n"] / n)
        return {"n": n, "mean": mean, "m2": m2}

    def fit_from_parts(self, summary: State) -> State:
        """What :meth:`fit` returns on all the parts' windows (float32, as windows are)."""
        import torch

        if not self.params.standardize:
            return {}
        std = torch.sqrt(summary["m2"] / summary["n"].clamp(min=1.0))
        std = torch.where(std > 0, std, torch.ones_like(std))
        return {"mean": summary["mean"].float(), "std": std.float()}

    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The spectrum rows, standardised when fitted, after ``x`` when ``append``."""
        import torch

        m = self._magnitudes(x).to(x.dtype)
        if state:
            m = (m - state["mean"]) / state["std"]
        return torch.cat([x, m], dim=1) if self.params.append else m

    def output_shape(self, window: int, features: int) -> tuple[int, int]:
        """``window + bins`` rows when appended, else ``bins``; same features."""
        bins = self._bins(window)
        return (window + bins if self.params.append else bins), features
