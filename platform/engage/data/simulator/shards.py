"""Large simulations streamed to Parquet shards by parallel Ray tasks, read back as a Ray Dataset.

The simulation is cut into blocks of ``households_per_shard`` households by
``days_per_shard`` days; each block is one Ray task that simulates it and writes one
Parquet file, returning only its name and row count. At most ``max_in_flight`` tasks are
pending at once, so the driver never holds more than a few shards' worth of anything and
no frame ever holds the whole set. ``_manifest.json`` beside the shards records the
scenario, seed and layout, which together determine every shard's content.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engage.data.simulator.generate import COLUMNS, SENSORS, block_columns
from engage.data.simulator.space import Scenario

MANIFEST = "_manifest.json"  # a leading "_": Parquet dataset readers skip it


@dataclass(frozen=True)
class Block:
    """One shard's households and days."""

    first_household: int
    households: int
    first_day: int
    days: int

    @property
    def name(self) -> str:
        """The shard's file name; sorting names sorts by household, then period."""
        return f"part-h{self.first_household:07d}-d{self.first_day:04d}.parquet"


@dataclass(frozen=True)
class ShardReport:
    """What :func:`write_shards` wrote.

    Attributes
    ----------
    out_dir : str
        The folder holding the shards and ``_manifest.json``.
    shards : int
        Number of Parquet files.
    rows : int
        Rows over all shards (household-minutes).
    readings : int
        Sensor readings over all shards (rows times sensor columns).
    seconds : float
        Wall time of the generation.
    """

    out_dir: str
    shards: int
    rows: int
    readings: int
    seconds: float

    @property
    def readings_per_second(self) -> float:
        """Throughput over the whole generation (all workers together)."""
        return self.readings / self.seconds if self.seconds > 0 else float("inf")


def plan(households: int, days: int, households_per_shard: int, days_per_shard: int | None):
    """The blocks covering ``households`` x ``days``, by household then period.

    Raises
    ------
    ValueError
        If a count or a shard size is below 1.
    """
    per_days = days_per_shard or days
    if min(households, days, households_per_shard, per_days) < 1:
        raise ValueError(
            "households, days, households_per_shard and days_per_shard must be >= 1; got "
            f"{households}, {days}, {households_per_shard}, {days_per_shard}"
        )
    return [
        Block(h, min(households_per_shard, households - h), d, min(per_days, days - d))
        for h in range(0, households, households_per_shard)
        for d in range(0, days, per_days)
    ]


def block_table(scenario: Mapping[str, float], seed: int, start: str, block: Block,
                total: int) -> pa.Table:  # fmt: skip
    """One block as an Arrow table: the columns of :func:`simulate_block`, built without
    pandas (the household ids are decoded from a dictionary in Arrow, not per row in Python).
    """
    columns, ids = block_columns(
        scenario, seed=seed, start=start, total_households=total, **asdict(block)
    )
    household = pa.DictionaryArray.from_arrays(pa.array(columns.pop("household")), pa.array(ids))
    arrays = {"household": household.cast(pa.string()), **columns}
    return pa.table({name: arrays[name] for name in COLUMNS})


def write_block(scenario: Mapping[str, float], seed: int, start: str, block: Block,
                total: int, out_dir: str) -> tuple[str, int]:  # fmt: skip
    """Simulate ``block`` and write it as one Parquet file; return its name and row count.

    The file is written under a hidden temporary name and renamed, so a reader never sees
    a half-written shard.
    """
    table = block_table(scenario, seed, start, block, total)
    path = Path(out_dir) / block.name
    partial = path.with_name(f".{block.name}.partial")  # hidden: readers skip it
    pq.write_table(table, partial)
    os.replace(partial, path)
    return block.name, table.num_rows


def _run_parallel(args: list[tuple], max_in_flight: int) -> Iterator[tuple[str, int]]:
    """Run :func:`write_block` as Ray tasks, at most ``max_in_flight`` pending at once."""
    import ray  # only here: importing engage.data never imports Ray

    task = ray.remote(num_cpus=1)(write_block)
    pending = []
    for arg in args:
        if len(pending) >= max_in_flight:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
        pending.append(task.remote(*arg))
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])


def _generate(args: list[tuple], max_in_flight: int | None) -> list[tuple[str, int]]:
    """Every block through Ray tasks; Ray starts here if no session is open yet."""
    import ray

    if not ray.is_initialized():  # as a first .remote() would: RAY_ADDRESS or a local Ray
        ray.init(include_dashboard=False, logging_level="WARNING")
    limit = max_in_flight or 2 * int(ray.available_resources().get("CPU", 1) or 1)
    return list(_run_parallel(args, max(1, limit)))


def write_shards(
    scenario: Scenario | Mapping[str, float] | None,
    out_dir: str | Path,
    *,
    households: int,
    days: int,
    seed: int,
    households_per_shard: int = 16,
    days_per_shard: int | None = None,
    start: str = "2026-01-05",
    parallel: bool = True,
    max_in_flight: int | None = None,
) -> ShardReport:
    """Generate a simulation as Parquet shards in ``out_dir``, in parallel Ray tasks.

    Parameters
    ----------
    scenario : Scenario or mapping
        The point of the scenario space (``None``: the default scenario).
    out_dir : str or Path
        Folder for the shards and ``_manifest.json``; created if missing. Shards of an
        earlier simulation in it are replaced.
    households, days, seed, start
        As for :func:`~engage.data.simulator.simulate`.
    households_per_shard, days_per_shard : int
        Shard size; ``days_per_shard=None`` puts all days of a household in one shard.
        A shard over a later period starts its thermal and air state afresh.
    parallel : bool
        Run one Ray task per shard (Ray starts locally if not yet initialised); ``False``
        writes the shards one by one in this process.
    max_in_flight : int, optional
        Ray tasks pending at once (default: twice the cluster's CPUs).

    Raises
    ------
    ValueError
        On an invalid scenario or a count or shard size below 1.
    """
    sc = scenario if isinstance(scenario, Scenario) else Scenario(scenario or {})
    blocks = plan(households, days, households_per_shard, days_per_shard)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)  # an interrupted write never looks finished
    for old in folder.glob("part-*.parquet"):
        old.unlink()
    began = time.perf_counter()
    args = [(sc.as_dict(), seed, start, b, households, str(folder)) for b in blocks]
    results = _generate(args, max_in_flight) if parallel else [write_block(*a) for a in args]
    seconds = time.perf_counter() - began
    rows = sum(n for _, n in results)
    manifest = {**layout(sc, households=households, days=days, seed=seed, start=start,
                         households_per_shard=households_per_shard, days_per_shard=days_per_shard),
                "shards": sorted(name for name, _ in results), "rows": rows}  # fmt: skip
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return ShardReport(str(folder), len(results), rows, rows * len(SENSORS), seconds)


def read_shards(out_dir: str | Path):
    """The shards in ``out_dir`` as a ``ray.data.Dataset`` (lazy: nothing is read yet).

    Raises
    ------
    FileNotFoundError
        If ``out_dir`` has no ``_manifest.json`` (no finished :func:`write_shards` there).
    """
    folder = Path(out_dir)
    if not (folder / MANIFEST).is_file():
        raise FileNotFoundError(f"{folder}: no {MANIFEST}; write the shards with write_shards")
    import ray.data  # only here: importing engage.data never imports Ray

    names = json.loads((folder / MANIFEST).read_text())["shards"]
    return ray.data.read_parquet([str(folder / n) for n in names])


def layout(scenario: Scenario | Mapping[str, float] | None, *, households: int, days: int,
           seed: int, start: str, households_per_shard: int, days_per_shard: int | None) -> dict:  # fmt: skip
    """What determines a shard folder's content: the manifest's fields but the shard list."""
    sc = scenario if isinstance(scenario, Scenario) else Scenario(scenario or {})
    return {"scenario": sc.as_dict(), "seed": seed, "households": households, "days": days,
            "start": start, "households_per_shard": households_per_shard,
            "days_per_shard": days_per_shard}  # fmt: skip


def is_complete(out_dir: str | Path, expected: dict) -> bool:
    """Whether ``out_dir`` holds a finished write of the simulation ``expected`` describes.

    ``expected`` is :func:`layout`'s dictionary; every shard the manifest lists must exist.
    """
    folder = Path(out_dir)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    same = all(manifest.get(k) == v for k, v in expected.items())
    return same and all((folder / name).is_file() for name in manifest.get("shards", []))


def ensure_shards(source, base_dir: Path, *, parallel: bool = False) -> Path:
    """The shard folder of a spec's ``simulation`` source, written first unless complete.

    Parameters
    ----------
    source : engage.spec.models.SimulationSource
        A source with ``shards`` set; ``shards.dir`` is taken relative to ``base_dir``.
    base_dir : Path
        The spec file's folder.
    parallel : bool
        Write with Ray tasks (:func:`write_shards`); ``False`` writes in this process.
    """
    folder = (Path(base_dir) / Path(source.shards.dir).expanduser()).resolve()
    sizes = {"households_per_shard": source.shards.households_per_shard,
             "days_per_shard": source.shards.days_per_shard}  # fmt: skip
    common = {"households": source.households, "days": source.days, "seed": source.seed,
              "start": source.start, **sizes}  # fmt: skip
    if not is_complete(folder, layout(source.scenario, **common)):
        write_shards(source.scenario, folder, parallel=parallel, **common)
    return folder
