"""A tiny slice of a simulation, for checking a spec's data without generating the data set.

``engage validate`` must not generate data: a large simulation takes minutes and, with
``shards`` set, writes hundreds of MiB. :func:`validation_slice` gives the same scenario,
seed, columns and windowing on a few households and days, simulated in memory and never
written, so the data checks (columns, labels, windows, splits, preprocessing) still run
on what the simulator makes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # engage.spec imports engage.data: a runtime import here would loop
    from engage.spec.models import DataSpec

SLICE_HOUSEHOLDS = 2
SLICE_DAYS = 2
_MINUTES_PER_DAY = 1440
_WINDOWS_PER_SERIES = 20  # a slice long enough that every split of a household gets windows


def validation_slice(data: DataSpec) -> DataSpec | None:
    """``data`` with its simulation cut to a slice simulated in memory, or None when the
    source is not a simulation (other sources are read or generated whole, cheaply).

    The slice keeps the scenario, seed and start; it has at most :data:`SLICE_HOUSEHOLDS`
    households and :data:`SLICE_DAYS` days (more when one window needs it), and no shards.
    """
    source = data.source
    if source.type != "simulation":
        return None
    span = _WINDOWS_PER_SERIES * (data.window + data.horizon)
    days = min(source.days, max(SLICE_DAYS, math.ceil(span / _MINUTES_PER_DAY)))
    households = min(source.households, SLICE_HOUSEHOLDS)
    sliced = source.model_copy(update={"households": households, "days": days, "shards": None})
    return data.model_copy(update={"source": sliced})


def slice_note(sliced: DataSpec, whole: DataSpec, rows: int) -> str:
    """How ``engage validate`` names the slice it checked (``rows`` rows), and what a run
    does instead."""
    cut, full = sliced.source, whole.source
    writes = ""
    if full.shards is not None:
        writes = f" into its shards in {full.shards.dir} (reused when they already hold it)"
        if whole.streaming is True:
            writes += " and streams the training split from them"
    return (
        f"a slice simulated in memory ({cut.households} of {full.households} households x "
        f"{cut.days} of {full.days} days, {rows:,} rows); engage run simulates the whole "
        f"set{writes}"
    )
