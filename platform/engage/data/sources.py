"""Data sources: one abstract class, one registry, looked up by the spec's ``source.type``.

A source only reads a table; every check of its content lives in :mod:`engage.data.checks`
so that a CSV, a Parquet file and the generator are held to the same rules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import pandas as pd

from engage.data.shards import combine, expand
from engage.data.simulator import ensure_shards, fill_dropouts, simulate
from engage.data.synthetic import generate_smart_living
from engage.errors import DataError
from engage.registry import Registry
from engage.spec.models import DataSpec

SYNTHETIC_NAME = "synthetic-smart-living"
SIMULATION_NAME = "simulated-smart-living"
GENERATED = ("synthetic", "simulation")
"""Source types that generate their table (keys ``timestamp`` and ``household``, no file)."""


class DataSource(ABC):
    """Reads the table a :class:`~engage.spec.models.DataSpec` points at.

    Subclasses set ``name`` (the spec's ``source.type``) and implement :meth:`load`; the
    :func:`register_source` decorator adds them to :data:`SOURCES`. A new source also
    needs its spec model in :mod:`engage.spec.models` (the ``Source`` union)::

        @register_source
        class JsonLinesSource(DataSource):
            '''One JSON object per line.'''

            name = "jsonl"

            def load(self, spec, base_dir):
                return pd.read_json(resolve_path(spec, base_dir), lines=True)
    """

    name: ClassVar[str]

    @abstractmethod
    def load(self, spec: DataSpec, base_dir: Path) -> pd.DataFrame:
        """Return the raw table, one row per record, in the source's own row order.

        Parameters
        ----------
        spec : DataSpec
            The data section of the pipeline spec.
        base_dir : Path
            Folder that relative file paths are resolved against (the spec file's folder).

        Returns
        -------
        pandas.DataFrame
            The unvalidated table with a default ``RangeIndex`` (row ``i`` is data row
            ``i + 1``, which error messages rely on).

        Raises
        ------
        DataError
            If the data cannot be read; the message names the file and the hint the fix.
        """


SOURCES: Registry[type[DataSource]] = Registry("data source", DataError)
"""Every data source by its spec name; an unknown name is a :class:`DataError` listing them."""


def register_source(cls: type[DataSource]) -> type[DataSource]:
    """Class decorator: add a :class:`DataSource` subclass to :data:`SOURCES` by its ``name``.

    Raises
    ------
    ValueError
        If another class is already registered under the same name.
    """
    return SOURCES.add(cls)


def get_source(name: str) -> DataSource:
    """Instantiate the registered source ``name``.

    Raises
    ------
    DataError
        If no source is registered as ``name``; the hint lists the valid names.
    """
    return SOURCES.get(name)()


def key_columns(spec: DataSpec) -> tuple[str, str | None]:
    """The timestamp column and the group column (``None`` for one series) of a spec's data."""
    if spec.source.type in GENERATED:
        return "timestamp", "household"
    return spec.source.timestamp, spec.source.group


def resolve_path(spec: DataSpec, base_dir: Path) -> Path:
    """The absolute path of a file source: relative paths are taken from ``base_dir``."""
    path = Path(spec.source.path).expanduser()
    return (path if path.is_absolute() else Path(base_dir) / path).resolve()


def describe_origin(spec: DataSpec, base_dir: Path) -> str:
    """How messages and fingerprints name where the data came from."""
    if spec.source.type in GENERATED:
        return spec.source.type
    return str(resolve_path(spec, base_dir))


def _existing_files(spec: DataSpec, base_dir: Path, suffix: str) -> list[Path]:
    """The shard files of a file source: its file, its folder's ``suffix`` files or its glob."""
    path = resolve_path(spec, base_dir)
    return expand(path, suffix, spec.source.path, Path(base_dir).resolve())


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, low_memory=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"data file {path} is empty", hint="write a header line") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise DataError(
            f"data file {path} is not readable as CSV: {exc}",
            hint="save it as UTF-8 CSV with one header line and the same number of "
            "fields on every line",
        ) from None


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DataError(
            f"data file {path} is not readable as Parquet: {exc}",
            hint="check that the file is a Parquet file and not truncated",
        ) from None
    # A frame saved with a named index (often the timestamp) keeps it as a column.
    return frame.reset_index(drop=frame.index.names == [None])


@register_source
class SyntheticSource(DataSource):
    """The built-in smart-living generator (see :func:`generate_smart_living`)."""

    name = "synthetic"

    def load(self, spec: DataSpec, base_dir: Path) -> pd.DataFrame:
        """Generate the table from ``spec.source`` (households, days, seed, start, noise).

        ``base_dir`` is unused: nothing is read from disk.
        """
        s = spec.source
        return generate_smart_living(s.households, s.days, s.seed, s.start, s.noise)


@register_source
class SimulationSource(DataSource):
    """The parameterised simulator (see :func:`engage.data.simulator.simulate`)."""

    name = "simulation"

    def load(self, spec: DataSpec, base_dir: Path) -> pd.DataFrame:
        """Simulate ``spec.source.scenario``; dropouts are filled forward unless told not to.

        With ``shards`` set, the table is read from the shard folder (relative to
        ``base_dir``), which is written first, in this process, unless it already holds
        this simulation. A household's readings lost before its first one are filled backward.
        """
        s = spec.source
        if s.shards is None:
            frame = simulate(s.scenario, households=s.households, days=s.days, seed=s.seed,
                             start=s.start)  # fmt: skip
        else:
            frame = pd.read_parquet(ensure_shards(s, Path(base_dir)))
        return fill_dropouts(frame) if s.fill_dropouts else frame


@register_source
class CsvSource(DataSource):
    """CSV with a header line: a file, a folder of shards or a glob; values checked later."""

    name = "csv"

    def load(self, spec: DataSpec, base_dir: Path) -> pd.DataFrame:
        """Read the CSV shards at ``spec.source.path`` as they are, with pandas' type inference.

        Raises
        ------
        DataError
            If the file is missing, a glob matches nothing, a folder holds no ``.csv``
            file, or a shard is empty, not UTF-8, not well-formed CSV, or has other
            columns than the first (naming the file and the column).
        """
        return combine(_existing_files(spec, base_dir, ".csv"), _read_csv)


@register_source
class ParquetSource(DataSource):
    """Parquet, read with pyarrow: a file, a folder of shards or a glob."""

    name = "parquet"

    def load(self, spec: DataSpec, base_dir: Path) -> pd.DataFrame:
        """Read the Parquet shards at ``spec.source.path``; a named index becomes a column.

        Raises
        ------
        DataError
            If the file is missing, a glob matches nothing, a folder holds no ``.parquet``
            file, or a shard is not readable as Parquet or has other columns or column
            types than the first (naming the file and the column).
        """
        return combine(_existing_files(spec, base_dir, ".parquet"), _read_parquet, types=True)


def load_frame(spec: DataSpec, base_dir: Path) -> pd.DataFrame:
    """Read the raw table of ``spec`` through the source registry.

    Parameters
    ----------
    spec : DataSpec
        The data section of the pipeline spec; ``spec.source.type`` picks the source.
    base_dir : Path
        Folder that relative file paths are resolved against.

    Returns
    -------
    pandas.DataFrame
        The table as read, not yet validated (see :func:`engage.data.validate_frame`).

    Raises
    ------
    DataError
        If the source is unknown or the file is missing or unreadable.
    """
    return get_source(spec.source.type).load(spec, Path(base_dir))


def read_table(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """Read a .parquet or .csv table that must have the ``required`` columns.

    Raises
    ------
    DataError
        Naming the file, if it is missing, has another suffix, cannot be read or lacks a
        ``required`` column.
    """
    if not path.exists():
        raise DataError(f"{path}: no such file")
    readers = {".parquet": pd.read_parquet, ".csv": pd.read_csv}
    if path.suffix not in readers:
        raise DataError(f"{path}: expected a .parquet or .csv file", hint="convert it first")
    try:
        frame = readers[path.suffix](path)
    except Exception as exc:
        raise DataError(f"{path}: cannot read it: {exc}") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        have = ", ".join(map(str, frame.columns)) or "none"
        raise DataError(
            f"{path}: no column {', '.join(repr(c) for c in missing)} (columns: {have})",
            hint=f"the file needs the columns {', '.join(required)}",
        )
    return frame
