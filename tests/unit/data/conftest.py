"""Fixtures shared by the streamed-preprocessing tests (test_streaming_preprocess.py and
test_stream_workers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engage.data import prepare
from engage.data import streaming as streaming_module
from engage.data.preprocess import fitted as fitted_module
from tests.unit.data._builders import file_spec
from tests.unit.data.test_streaming_preprocess import STEPS, _shards


@pytest.fixture
def both(tmp_path: Path, monkeypatch) -> tuple:
    """The in-memory and streamed data stages of one spec with row and window operators.

    Chunks of 20 windows and reader blocks of 7 make augmentation chunks straddle both
    reader blocks and units, as large splits do.
    """
    monkeypatch.setattr(fitted_module, "CHUNK", 20)
    monkeypatch.setattr(streaming_module, "BLOCK_WINDOWS", 7)
    _shards(tmp_path / "s")
    memory = prepare(file_spec("s", "parquet", streaming=False, preprocess=STEPS), tmp_path)
    streamed = prepare(file_spec("s", "parquet", streaming=True, preprocess=STEPS), tmp_path)
    return memory, streamed
