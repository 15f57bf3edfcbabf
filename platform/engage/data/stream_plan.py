"""The plan of a streamed data set: its shards, their schema and the units they are read in.

Before anything is trained, a streamed ``csv`` or ``parquet`` source is checked shard by
shard without reading its values: the file, folder or glob must name files, every file
must be readable and have the columns (and, for Parquet, the column types) of the first.
Then only the key columns are read, to find the overall time range (the split cuts, from
each group's first and last time after the row operators of ``data.preprocess``) and
the *units*: the smallest sets of shards that hold whole groups (households). A unit is
what one reader holds in memory at a time; windows never cross a group, so a unit can be
windowed on its own. Units come in the order of their first group, which is the in-memory
path's canonical order when shards hold consecutive groups (as the simulator writes them).

A ``simulation`` source with ``shards`` streams too: its shards are written first (in this
process, unless the folder already holds that simulation) and then planned as the
``parquet`` source of that folder, grouped by household; each unit's dropouts are filled
as the in-memory source fills them (:func:`engage.data.simulator.fill_dropouts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from engage.data.checks import _timestamps, _Where
from engage.data.preprocess import build_operators, stream_refusals
from engage.data.shards import expand
from engage.data.simulator import ensure_shards
from engage.data.sources import SIMULATION_NAME, key_columns, resolve_path
from engage.data.windowing import cut_times
from engage.errors import DataError
from engage.spec.models import DataSpec, ParquetSource

STREAMED = ("csv", "parquet")
"""File source types that can stream; a ``simulation`` with ``shards`` streams its shards."""


@dataclass(frozen=True)
class StreamPlan:
    """What every reader of a streamed data set needs: small, so it travels to Ray tasks.

    Attributes
    ----------
    spec : DataSpec
        The data section (columns, window, horizon, stride, split).
    files : tuple of str
        Every shard, sorted by path.
    units : tuple of tuple of int
        Indices into ``files`` of each unit's shards, units in canonical order.
    rows : int
        Rows over all shards.
    bytes : int
        Size on disk of all shards.
    origin : str
        How messages name the data (the resolved ``data.source.path``).
    cuts : tuple of numpy.datetime64
        The split cut times ``t1 < t2`` over the overall time range of all shards.
    fill_dropouts : bool
        Fill each unit's missing float readings per group before checking it (a streamed
        simulation with ``fill_dropouts``, as its in-memory source does).
    name : str
        The data set's name in its fingerprint.
    params : dict
        The generator's parameters in its fingerprint (a streamed simulation's source).
    """

    spec: DataSpec
    files: tuple[str, ...]
    units: tuple[tuple[int, ...], ...]
    rows: int
    bytes: int
    origin: str
    cuts: tuple[np.datetime64, np.datetime64]
    fill_dropouts: bool = False
    name: str = "shards"
    params: dict = field(default_factory=dict)


def shard_files(spec: DataSpec, base_dir: Path) -> list[Path]:
    """The shard files of a ``csv`` or ``parquet`` source, sorted.

    Raises
    ------
    DataError
        If the path does not exist, the folder holds no shard or the glob matches nothing.
    """
    suffix = "." + spec.source.type
    path = resolve_path(spec, base_dir)
    return expand(path, suffix, spec.source.path, Path(base_dir).resolve())


def _schema(path: Path, kind: str) -> dict[str, str]:
    """Column name to type of one shard, read from its footer (Parquet) or header (CSV)."""
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return {f.name: str(f.type) for f in pq.read_schema(path)}
        return {str(c): "" for c in pd.read_csv(path, nrows=0).columns}
    except Exception as exc:  # pyarrow and pandas raise several unrelated types
        what = "Parquet" if kind == "parquet" else "CSV"
        raise DataError(
            f"data file {path} is not readable as {what}: {exc}",
            hint="check that the file is complete and in the source's format",
        ) from None


def check_schemas(paths: list[Path], kind: str, needed: list[str]) -> None:
    """Every shard has the columns (and Parquet types) of the first; the spec's columns exist.

    Raises
    ------
    DataError
        Naming the file and the column that is missing, extra or of another type, or a
        file that cannot be read.
    """
    first = _schema(paths[0], kind)
    absent = [c for c in needed if c not in first]
    if absent:
        raise DataError(
            f"shard {paths[0]}: no column {absent[0]!r} (columns: {', '.join(first)})",
            hint="fix the column names in data.features / data.target / data.source",
        )
    hint = f"every shard needs the columns of {paths[0].name}: {', '.join(first)}"
    for path in paths[1:]:
        schema = _schema(path, kind)
        missing = [c for c in first if c not in schema]
        if missing:
            raise DataError(f"shard {path}: no column {missing[0]!r}", hint=hint)
        extra = [c for c in schema if c not in first]
        if extra:
            raise DataError(f"shard {path}: unexpected column {extra[0]!r}", hint=hint)
        for name, want in first.items():
            if schema[name] != want:
                raise DataError(
                    f"shard {path}: column {name!r} is {schema[name]}, but {want} in "
                    f"{paths[0].name}",
                    hint="write every shard with the same column types",
                )


def read_columns(path: Path, kind: str, columns: list[str]) -> pd.DataFrame:
    """Only ``columns`` of one shard (a Parquet shard reads nothing else from disk).

    Raises
    ------
    DataError
        Naming the file, if it cannot be read.
    """
    try:
        if kind == "parquet":
            return pd.read_parquet(path, columns=columns)
        return pd.read_csv(path, usecols=columns, low_memory=False)
    except Exception as exc:  # a file truncated after its footer or header was read
        raise DataError(
            f"data file {path} is not readable: {exc}",
            hint="check that the file is complete and in the source's format",
        ) from None


def _units(groups: list[np.ndarray]) -> list[tuple[int, ...]]:
    """Connected sets of shards (shards sharing a group), ordered by their smallest group."""
    parent = list(range(len(groups)))

    def _root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[object, int] = {}
    for i, values in enumerate(groups):
        for g in values.tolist():
            j = owner.setdefault(g, i)
            parent[_root(i)] = _root(j)
    members: dict[int, list[int]] = {}
    for i in range(len(groups)):
        members.setdefault(_root(i), []).append(i)
    lowest = {r: min(v for i in m for v in groups[i].tolist()) for r, m in members.items()}
    return [tuple(members[r]) for r in sorted(members, key=lambda r: lowest[r])]


def streams_shards(spec: DataSpec) -> bool:
    """Whether ``spec``'s source can stream: a csv or parquet file source, or a simulation
    with ``shards``."""
    source = spec.source
    return source.type in STREAMED or (source.type == "simulation" and source.shards is not None)


def simulation_files(spec: DataSpec, base_dir: Path) -> DataSpec:
    """A sharded simulation's data section as the ``parquet`` source of its shard folder.

    The shards are written first (in this process) unless the folder already holds this
    simulation; the result names the folder by its absolute path, grouped by household.
    """
    folder = ensure_shards(spec.source, Path(base_dir))
    source = ParquetSource(type="parquet", path=str(folder), group="household")
    return spec.model_copy(update={"source": source})


def plan_stream(spec: DataSpec, base_dir: Path) -> StreamPlan:
    """Check the shards of a streamed source and cut them into units (key columns only).

    A ``simulation`` source is planned as its shard folder (:func:`simulation_files`).

    Raises
    ------
    DataError
        A glob matching nothing, an unreadable shard, or a shard of another schema.
    """
    if spec.source.type == "simulation":
        plan = plan_stream(simulation_files(spec, base_dir), base_dir)
        params = spec.source.model_dump(exclude={"type"})
        return replace(plan, fill_dropouts=spec.source.fill_dropouts, name=SIMULATION_NAME,
                       params=params)  # fmt: skip
    kind = spec.source.type
    paths = shard_files(spec, base_dir)
    time, group = key_columns(spec)
    needed = list(dict.fromkeys([time, *([group] if group else []), *spec.features, spec.target]))
    check_schemas(paths, kind, needed)
    rows, groups, spans = 0, [], []
    for path in paths:
        keys = read_columns(path, kind, [time, group] if group else [time])
        if keys.empty:
            raise DataError(f"shard {path} has no data rows", hint="remove the empty shard")
        rows += len(keys)
        stamps = _timestamps(keys[time], time, _Where(f"shard {path}", csv=kind == "csv"))
        spans.append(_group_spans(stamps, keys[group] if group else None))
        groups.append(pd.unique(keys[group].dropna()) if group else np.zeros(1, np.int64))
    units = _units(groups) if group else [tuple(range(len(paths)))]
    return StreamPlan(
        spec=spec,
        files=tuple(str(p) for p in paths),
        units=tuple(units),
        rows=rows,
        bytes=sum(p.stat().st_size for p in paths),
        origin=str(resolve_path(spec, base_dir)),
        cuts=cut_times(_time_range(spans, spec), spec.split),
        name=Path(spec.source.path).stem or "shards",
    )


def _group_spans(stamps: pd.Series, ids: pd.Series | None) -> pd.DataFrame:
    """First and last time (int64 ns, columns ``min`` and ``max``) of each group in a shard."""
    ns = pd.Series(stamps.to_numpy(dtype="datetime64[ns]").view(np.int64))
    key = np.zeros(len(ns), np.int64) if ids is None else ids.to_numpy()
    return ns.groupby(key).agg(["min", "max"])


def _time_range(spans: list[pd.DataFrame], spec: DataSpec) -> np.ndarray:
    """The overall first and last time after the row operators, from every group's span.

    A group may span shards; row operators (``resample``) move a group's last time, so
    the in-memory path, which cuts the resampled table, is matched group by group.
    """
    both = pd.concat(spans).groupby(level=0).agg({"min": "min", "max": "max"})
    firsts, lasts = both["min"].tolist(), both["max"].tolist()
    for op in build_operators(spec.preprocess):
        if op.level == "row":
            firsts, lasts = zip(*map(op.time_span, firsts, lasts), strict=True)
    return np.array([min(firsts), max(lasts)], dtype=np.int64).view("datetime64[ns]")


def should_stream(spec: DataSpec, base_dir: Path) -> bool:
    """Whether ``spec`` takes the streaming path (``data.streaming``; ``auto`` by size).

    ``auto`` streams a ``csv`` or ``parquet`` source, or a simulation with ``shards``,
    whose shards together are larger than ``data.streaming_threshold_mb`` on disk, unless
    a ``data.preprocess`` operator cannot fit on a stream (``clip`` by ``quantile``: that
    spec stays in memory, as ``streaming: true`` with it is refused); a simulation's shards
    are written first to measure them (either path reads them); other generated sources
    never stream.

    Raises
    ------
    DataError
        If ``auto`` must measure a file source that names no file.
    """
    if spec.streaming is False or not streams_shards(spec):
        return False  # the spec refuses `streaming: true` without a source that streams
    if spec.streaming == "auto" and stream_refusals(build_operators(spec.preprocess)):
        return False
    if spec.streaming is True:
        return True
    if spec.source.type == "simulation":
        spec = simulation_files(spec, base_dir)
    size = sum(p.stat().st_size for p in shard_files(spec, base_dir))
    return size > spec.streaming_threshold_mb * 2**20
