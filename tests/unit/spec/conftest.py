"""Shared spec fixtures: writing YAML text to a file under tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[str], Path]:
    """Write YAML text to ``tmp_path/spec.yaml`` and return the path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
