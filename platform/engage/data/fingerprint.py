"""Dataset fingerprints: a content digest that is stable across runs and processes.

The digest covers the column names, their dtypes and every value, so two runs that trained
on the same digest saw the same table. ``pandas.util.hash_pandas_object`` hashes with a
fixed key, never Python's salted ``hash``, which is what makes it stable across processes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from engage.data.sources import GENERATED, SIMULATION_NAME, SYNTHETIC_NAME, describe_origin
from engage.spec.models import DataSpec


@dataclass(frozen=True)
class DatasetFingerprint:
    """What a dataset was: where from, how big, which schema, and a digest of its content.

    Attributes
    ----------
    name : str
        ``"synthetic-smart-living"`` or the data file's stem.
    source : str
        ``"synthetic"`` or the data file's absolute path.
    digest : str
        sha256 hex of the table's columns, dtypes and values.
    rows : int
        Number of rows in the table.
    schema : dict[str, str]
        Column name to dtype string, in column order.
    params : dict[str, object]
        Generator parameters for synthetic data; empty for files.
    """

    name: str
    source: str
    digest: str
    rows: int
    schema: dict[str, str] = field(default_factory=dict)
    params: dict[str, object] = field(default_factory=dict)


def table_digest(frame: pd.DataFrame) -> str:
    """sha256 hex over the column names, dtypes and values of ``frame`` (index ignored).

    Parameters
    ----------
    frame : pandas.DataFrame
        Any table; row order matters, index labels do not.

    Returns
    -------
    str
        64 hex characters, identical for identical tables in any process.
    """
    digest = hashlib.sha256()
    header = [[str(c), str(t)] for c, t in frame.dtypes.items()]
    digest.update(json.dumps(header).encode())
    digest.update(len(frame).to_bytes(8, "little"))
    for name in frame.columns:
        # Per column, so that swapping two columns' values changes the digest.
        hashed = pd.util.hash_pandas_object(frame[name], index=False)
        digest.update(hashed.to_numpy(dtype=np.uint64).tobytes())
    return digest.hexdigest()


def fingerprint(frame: pd.DataFrame, spec: DataSpec, base_dir: Path) -> DatasetFingerprint:
    """Fingerprint the validated table of ``spec``.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table returned by :func:`engage.data.validate_frame`.
    spec : DataSpec
        The data section of the pipeline spec (names the source and its parameters).
    base_dir : Path
        Folder that relative file paths are resolved against.

    Returns
    -------
    DatasetFingerprint
        Name, source, digest, row count, schema and generator parameters.
    """
    source = spec.source
    if source.type in GENERATED:
        name = SYNTHETIC_NAME if source.type == "synthetic" else SIMULATION_NAME
        params = source.model_dump(exclude={"type"})
    else:
        name = Path(source.path).stem
        params = {}
    return DatasetFingerprint(
        name=name,
        source=describe_origin(spec, base_dir),
        digest=table_digest(frame),
        rows=len(frame),
        schema={str(c): str(t) for c, t in frame.dtypes.items()},
        params=params,
    )
