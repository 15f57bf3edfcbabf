"""Schema checks on a raw table, before any windowing.

Every problem is a :class:`~engage.errors.DataError` that names the column and the first
offending row. Rows are 1-based data rows in the table's own order; for a CSV file the
message adds the file line (row + 1, for the header line), which assumes one line per row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engage.data.sources import key_columns
from engage.errors import DataError
from engage.spec.models import DataSpec


def _in_all(n: int) -> str:
    return f"{n} row in all" if n == 1 else f"{n} rows in all"


class _Where:
    """Formats row positions (0-based) for messages about one table."""

    def __init__(self, origin: str, csv: bool) -> None:
        self.origin = origin
        self.csv = csv

    def row(self, pos: int) -> str:
        """How messages name the row at 0-based position ``pos``, with the file line for a CSV."""
        text = f"row {pos + 1}"
        return f"{text} (file line {pos + 2})" if self.csv else text

    def fail(self, message: str, hint: str | None = None) -> DataError:
        """A :class:`DataError` whose message starts with the table's origin."""
        return DataError(f"{self.origin}: {message}", hint=hint)


def _check_present(frame: pd.DataFrame, needed: list[str], where: _Where) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        names = ", ".join(repr(c) for c in missing)
        present = ", ".join(repr(str(c)) for c in frame.columns) or "none"
        raise where.fail(
            f"missing column(s) {names}; present: {present}",
            hint="fix the column names in data.features / data.target / data.source, "
            "or in the file's header",
        )


def _numeric(column: pd.Series, name: str, where: _Where) -> pd.Series:
    """Return ``column`` as numbers, or fail naming the first value that is not one."""
    if pd.api.types.is_bool_dtype(column):
        return column.astype(np.float64)
    if pd.api.types.is_numeric_dtype(column):
        return column
    values = pd.to_numeric(column, errors="coerce")
    bad = values.isna() & column.notna()
    if bad.any():
        pos = np.flatnonzero(bad.to_numpy())
        raise where.fail(
            f"column {name!r} is not numeric: {where.row(pos[0])} has {column.iloc[pos[0]]!r} "
            f"({_in_all(len(pos))})",
            hint="every value of a feature (and of a regression target) must be a number",
        )
    return values


def _check_finite(values: pd.Series, name: str, where: _Where) -> None:
    array = values.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(array)
    if bad.any():
        pos = np.flatnonzero(bad)
        first = array[pos[0]]
        kind = "NaN" if np.isnan(first) else ("inf" if first > 0 else "-inf")
        raise where.fail(
            f"column {name!r} has {kind} at {where.row(pos[0])} ({_in_all(len(pos))})",
            hint="fill or drop these rows before training; engage does not impute",
        )


def _labels(column: pd.Series, name: str, where: _Where) -> pd.Series:
    """Classification labels: numbers or strings, never missing."""
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        _check_finite(column, name, where)
        integral = np.all(np.mod(column.to_numpy(dtype=np.float64), 1.0) == 0.0)
        return column.astype(np.int64) if integral else column
    missing = column.isna().to_numpy()
    if missing.any():
        pos = np.flatnonzero(missing)
        raise where.fail(
            f"column {name!r} has no label at {where.row(pos[0])} ({_in_all(len(pos))})",
            hint="every row needs a class label",
        )
    return column if pd.api.types.is_bool_dtype(column) else column.astype(str)


def _timestamps(column: pd.Series, name: str, where: _Where) -> pd.Series:
    """Parse times to naive datetime64[ns]; zone-aware times are converted to UTC."""
    if pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        raise where.fail(
            f"column {name!r} holds numbers, not times (row 1 has {column.iloc[0]!r})",
            hint="write times as ISO 8601 text, e.g. 2026-01-05 08:30:00",
        )
    if pd.api.types.is_datetime64_any_dtype(column):
        parsed = column if column.dt.tz is None else column.dt.tz_convert(None)
    else:
        # utc=True keeps naive wall times as they are and converts zone-aware ones.
        parsed = pd.to_datetime(column, errors="coerce", utc=True)
        retry = parsed.isna() & column.notna()
        if retry.any():  # the format pandas inferred from row 1 does not fit every row
            parsed[retry] = pd.to_datetime(column[retry], errors="coerce", format="mixed", utc=True)
        parsed = parsed.dt.tz_convert(None)
    bad = parsed.isna().to_numpy()
    if bad.any():
        pos = np.flatnonzero(bad)
        raw = column.iloc[pos[0]]
        shown = "an empty value" if pd.isna(raw) else repr(str(raw))
        raise where.fail(
            f"column {name!r} has an unparseable time at {where.row(pos[0])}: {shown} "
            f"({_in_all(len(pos))})",
            hint="write times as ISO 8601 text, e.g. 2026-01-05 08:30:00",
        )
    return parsed.astype("datetime64[ns]")


def _check_groups(column: pd.Series, name: str, where: _Where) -> None:
    missing = column.isna().to_numpy()
    if missing.any():
        pos = np.flatnonzero(missing)
        raise where.fail(
            f"column {name!r} (the group) is empty at {where.row(pos[0])} ({_in_all(len(pos))})",
            hint="every row needs a group id, or remove data.source.group for one series",
        )


def _check_duplicates(
    frame: pd.DataFrame, keys: list[str], rows: np.ndarray, where: _Where
) -> None:
    """``frame`` is sorted by ``keys``; ``rows`` holds each row's original position."""
    dup = frame.duplicated(keys, keep=False).to_numpy()
    if dup.any():
        pos = np.flatnonzero(dup)
        first = frame.iloc[pos[0]]
        twins = np.sort(rows[pos[:2]])
        grouped = len(keys) == 2
        group = f" in group {first[keys[0]]!r}" if grouped else ""
        hint = (
            "keep one row per time and group"
            if grouped
            else ("keep one row per time; if the rows are separate series, set data.source.group")
        )
        raise where.fail(
            f"duplicate timestamp {first[keys[-1]]}{group}: {where.row(twins[0])} and "
            f"{where.row(twins[1])} ({len(pos)} rows in all share a timestamp)",
            hint=hint,
        )


def _check_lengths(frame: pd.DataFrame, group: str | None, spec: DataSpec, where: _Where) -> None:
    need = spec.window + spec.horizon
    sizes = frame.groupby(group, sort=True).size() if group else pd.Series({None: len(frame)})
    short = sizes[sizes < need]
    if len(short):
        name, size = short.index[0], int(short.iloc[0])
        what = f"group {name!r}" if group else "the table"
        raise where.fail(
            f"{what} has {size} rows, fewer than window + horizon = {spec.window} + "
            f"{spec.horizon} = {need} ({len(short)} group(s) too short)",
            hint="use a smaller data.window or data.horizon, or supply more rows",
        )


def validate_frame(frame: pd.DataFrame, spec: DataSpec, origin: str) -> pd.DataFrame:
    """Check a raw table against the spec and return it cleaned and sorted.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table as a source read it; row ``i`` (0-based position) is data row ``i + 1``.
    spec : DataSpec
        The data section of the pipeline spec (columns, task, window, horizon).
    origin : str
        Where the table came from (a file path or ``"synthetic"``), prefixed to messages.

    Returns
    -------
    pandas.DataFrame
        Only the timestamp, group (if any), feature and target columns, in that order;
        times as naive ``datetime64[ns]``, features numeric, classification labels as
        ints or strings; sorted by group then time, with a fresh ``RangeIndex``.

    Raises
    ------
    DataError
        On a missing column, a non-numeric or non-finite feature, a missing or
        non-numeric target, an unparseable or duplicate time, or a group shorter than
        ``window + horizon``; the message names the column and the first bad row.
    """
    where = _Where(origin, csv=spec.source.type == "csv")
    time, group = key_columns(spec)
    keys = [time] if group is None else [group, time]
    needed = list(dict.fromkeys([time, *keys, *spec.features, spec.target]))
    _check_present(frame, needed, where)
    if frame.empty:
        raise where.fail("the table has no data rows", hint="supply at least window + horizon rows")
    out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
    for name in needed:
        column = frame[name].reset_index(drop=True)
        if name == time:
            out[name] = _timestamps(column, name, where)
        elif name == group:
            _check_groups(column, name, where)
            out[name] = column
        else:
            if name in spec.features or spec.task == "regression":
                column = _numeric(column, name, where)
                _check_finite(column, name, where)
            is_label = name == spec.target and spec.task == "classification"
            out[name] = _labels(column, name, where) if is_label else column
    out = out.sort_values(keys, kind="stable")
    order = out.index.to_numpy()
    out = out.reset_index(drop=True)
    _check_duplicates(out, keys, order, where)
    _check_lengths(out, group, spec, where)
    return out
