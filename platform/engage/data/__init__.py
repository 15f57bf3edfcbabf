"""Datasets for engage: sources, schema checks, time-ordered windows, fingerprints.

``prepare(spec.data, base_dir)`` is the whole data stage; the other names are its parts,
public so that the CLI, the dashboard and tests can call them one at a time.
"""

from engage.data.checks import validate_frame
from engage.data.fingerprint import DatasetFingerprint, fingerprint, table_digest
from engage.data.prepare import PreparedData, prepare
from engage.data.sources import SOURCES, DataSource, get_source, load_frame, register_source
from engage.data.synthetic import generate_smart_living
from engage.data.windowing import Normalization, Split, make_splits

__all__ = [
    "SOURCES",
    "DataSource",
    "DatasetFingerprint",
    "Normalization",
    "PreparedData",
    "Split",
    "fingerprint",
    "generate_smart_living",
    "get_source",
    "load_frame",
    "make_splits",
    "prepare",
    "register_source",
    "table_digest",
    "validate_frame",
]
