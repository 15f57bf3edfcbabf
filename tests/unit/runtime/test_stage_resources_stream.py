"""A data stage on the cluster (``data.resources``) and a streamed training split do not
mix: ``streaming: auto`` that streams is refused at ``data.resources`` (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engage.errors import SpecError
from engage.runtime.stages import prepare_data
from engage.spec import load_spec
from tests.unit.runtime.test_streamed_callers import _spec


def test_a_split_that_streams_by_size_refuses_a_data_stage_request(tmp_path: Path) -> None:
    # Arrange: streaming auto, with a threshold every file is above.
    path = _spec(tmp_path)
    spec = yaml.safe_load(path.read_text())
    spec["data"] |= {
        "streaming": "auto",
        "streaming_threshold_mb": 1e-9,
        "resources": {"CPU": 0.5},
    }
    path.write_text(yaml.safe_dump(spec))
    loaded = load_spec(path)

    # Act
    with pytest.raises(SpecError) as caught:
        prepare_data(loaded, streamed=True)

    # Assert: located at the field, saying why and what to do.
    message = str(caught.value)
    assert "data.resources" in message
    assert "the training split streams" in message
    assert "set data.streaming: false" in message
