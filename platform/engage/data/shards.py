"""Data sets split into shards: a file, a folder of files or a glob, read as one table.

A file source's ``path`` may name one file, a folder (every file in it with the source's
suffix) or a glob (``data/part-*.parquet``). The shards are read in sorted path order and
must agree on their columns (and, for Parquet, on each column's type); a shard that does
not is a :class:`~engage.errors.DataError` naming the file and the column, raised before
any training starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from engage.errors import DataError

GLOB_CHARS = frozenset("*?[")


def is_glob(path: str | Path) -> bool:
    """Whether ``path`` holds a glob pattern (``*``, ``?`` or ``[``)."""
    return any(c in GLOB_CHARS for c in str(path))


def expand(path: Path, suffix: str, field: str, base_dir: Path) -> list[Path]:
    """The shard files ``path`` names, sorted.

    Parameters
    ----------
    path : Path
        Absolute file, folder or glob.
    suffix : str
        The suffix a folder's shards have (``.csv``, ``.parquet``).
    field : str
        The spec value as written, for the hint.
    base_dir : Path
        Where relative paths were resolved from, for the hint.

    Raises
    ------
    DataError
        If the file or folder does not exist, the folder holds no ``suffix`` file, or the
        glob matches no file.
    """
    hint = f"check data.source.path ({field!r}); relative paths are taken from {base_dir}"
    if is_glob(path):
        anchor = Path(path.anchor)
        found = sorted(p for p in anchor.glob(str(path.relative_to(anchor))) if p.is_file())
        if not found:
            raise DataError(f"data glob {path} matches no file", hint=hint)
        return found
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix == suffix)
        if not found:
            raise DataError(f"data folder {path} holds no {suffix} file", hint=hint)
        return found
    if not path.is_file():
        raise DataError(f"data file {path} does not exist", hint=hint)
    return [path]


def combine(
    paths: list[Path], read: Callable[[Path], pd.DataFrame], types: bool = False
) -> pd.DataFrame:
    """Read every shard with ``read`` and stack them, checking that their schemas agree.

    Parameters
    ----------
    paths : list of Path
        The shards, in order; the first one's columns are the schema.
    read : callable
        Reads one shard (raising a :class:`DataError` that names it when unreadable).
    types : bool
        Require each column's dtype to equal the first shard's (typed formats such as
        Parquet); otherwise a column need only stay numeric or non-numeric (CSV, whose
        types are inferred per file).

    Raises
    ------
    DataError
        Naming the shard and the column that is missing, extra or of another type.
    """
    first = read(paths[0])
    if len(paths) == 1:
        return first
    frames = [first]
    for path in paths[1:]:
        frame = read(path)
        _check_schema(first, paths[0], frame, path, types)
        frames.append(frame[list(first.columns)])
    return pd.concat(frames, ignore_index=True)


def _check_schema(
    first: pd.DataFrame, first_path: Path, frame: pd.DataFrame, path: Path, types: bool
) -> None:
    """The shard at ``path`` has exactly the columns of the first shard (and their types)."""
    hint = (
        f"every shard needs the columns of {first_path.name}: {', '.join(map(str, first.columns))}"
    )
    missing = [c for c in first.columns if c not in frame.columns]
    if missing:
        raise DataError(f"shard {path}: no column {missing[0]!r}", hint=hint)
    extra = [c for c in frame.columns if c not in first.columns]
    if extra:
        raise DataError(f"shard {path}: unexpected column {extra[0]!r}", hint=hint)
    for name in first.columns:
        want, got = first[name].dtype, frame[name].dtype
        numeric = pd.api.types.is_numeric_dtype
        if (want != got) if types else (numeric(want) != numeric(got)):
            raise DataError(
                f"shard {path}: column {name!r} is {got}, but {want} in {first_path.name}",
                hint="write every shard with the same column types",
            )
