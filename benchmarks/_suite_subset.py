"""pytest plugin for benchmarks/suite_time.py: run only the test files a list names.

Loaded with ``-p _suite_subset`` (benchmarks/ on PYTHONPATH); the list is a file of paths
relative to the repository, one per line, named by ``ENGAGE_SUITE_FILES``. Tests in other
files are deselected (pytest reports them as such), so session fixtures only they use never
start.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the items whose file is on the list; report the rest as deselected."""
    listed = Path(os.environ["ENGAGE_SUITE_FILES"]).read_text().split()
    keep_files = set(listed)
    root = Path(config.rootpath)
    kept, dropped = [], []
    for item in items:
        (kept if str(Path(item.path).relative_to(root)) in keep_files else dropped).append(item)
    items[:] = kept
    if dropped:
        config.hook.pytest_deselected(items=dropped)
