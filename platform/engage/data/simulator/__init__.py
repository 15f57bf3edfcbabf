"""A parameterised smart-living simulator: scenarios, routines, weather, physics, faults, shards.

A :class:`Scenario` is a point of :data:`SCENARIO_SPACE` (household size, insulation,
climate, heating, sensor quality, fault rates, ...). :func:`simulate` turns a scenario and a
seed into a frame of sensors and labels; :func:`write_shards` streams a large simulation to
Parquet shards in parallel Ray tasks and :func:`read_shards` opens them as a Ray Dataset;
:func:`validation_slice` is the few households and days ``engage validate`` checks instead.
See docs/simulator.md for every parameter and the realism checks.
"""

from engage.data.simulator.faults import FAULTS, fill_dropouts
from engage.data.simulator.generate import (
    COLUMNS,
    SENSORS,
    block_columns,
    simulate,
    simulate_block,
)
from engage.data.simulator.labels import LABELS
from engage.data.simulator.routines import ACTIVITIES
from engage.data.simulator.sample import slice_note, validation_slice
from engage.data.simulator.shards import ShardReport, ensure_shards, read_shards, write_shards
from engage.data.simulator.space import SCENARIO_SPACE, Parameter, Scenario

__all__ = [
    "ACTIVITIES",
    "COLUMNS",
    "FAULTS",
    "LABELS",
    "SCENARIO_SPACE",
    "SENSORS",
    "Parameter",
    "Scenario",
    "ShardReport",
    "block_columns",
    "ensure_shards",
    "fill_dropouts",
    "read_shards",
    "simulate",
    "simulate_block",
    "slice_note",
    "validation_slice",
    "write_shards",
]
