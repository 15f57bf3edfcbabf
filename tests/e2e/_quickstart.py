"""What the session's one ``engage quickstart`` did, and how to read its live monitor view.

Plain helpers, no pytest: tests/e2e/conftest.py fills a QuickstartSession once per session;
the tests that read it import the type and the row parser from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class QuickstartSession:
    """What one ``engage quickstart --set deploy.port=PORT`` did, as its tests read it."""

    folder: Path  # the working directory (pipelines/ copied in); ENGAGE_HOME is folder/.engage
    port: int
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    monitor_views: list[str] = field(default_factory=list)  # `engage monitor --once` outputs
    monitor_failure: str | None = None  # a view that exited non-zero: its output
    answer: dict | None = None  # the served endpoint's JSON answer to the printed example
    answer_failure: str | None = None  # why there is no answer
    wall_seconds: float = 0.0  # the quickstart command, start to exit
    other_cpu_seconds: float = 0.0  # CPU the other work beside it (tests/e2e/conftest.py) got

    @property
    def home(self) -> Path:
        """The ENGAGE_HOME the quickstart wrote (MLflow store, event store, spool)."""
        return self.folder / ".engage"


def job_row(table: str, run_id: str) -> list[str] | None:
    """The cells of ``run_id``'s row in the live table (rich draws them between │)."""
    for line in table.splitlines():
        if run_id in line:
            return [c.strip() for c in line.strip().strip("│┃").split("│")]
    return None


def training_row(view: str, job: str = "quickstart") -> list[str] | None:
    """The first row of ``job`` in a ``monitor --once`` view (None when it shows none).

    By name: the quickstart trains on the serving head it starts, whose app has a row of
    its own (``serve-...``) that may be listed first.
    """
    rows = (job_row(view, m) for m in re.findall(r"[0-9a-f]{32}", view))
    return next((row for row in rows if row and row[0] == job), None)
