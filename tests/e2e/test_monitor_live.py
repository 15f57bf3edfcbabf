"""`engage monitor --once` during `engage quickstart`: the running job's row, live.

The quickstart is the session's one run (``quickstart_session`` in tests/e2e/conftest.py),
which polls the live view from its first epoch until the job's row shows one.
"""

from __future__ import annotations

import pytest
from _quickstart import QuickstartSession, training_row

pytestmark = pytest.mark.e2e


def test_monitor_once_shows_the_quickstart_training_live(
    quickstart_session: QuickstartSession,
) -> None:
    quickstart, rest = quickstart_session, quickstart_session.stdout
    seen = quickstart.monitor_views
    row = training_row(seen[-1]) if seen else None  # the row the polling stopped at

    assert quickstart.monitor_failure is None, quickstart.monitor_failure
    assert quickstart.returncode == 0, rest[-3000:]
    assert row is not None, "no job row while the quickstart ran:\n" + "\n".join(seen)
    job, run_id, state, stage, epoch, _, _, samples_per_s = row[:8]
    assert (job, state, stage) == ("quickstart", "running", "train"), row
    assert 1 <= int(epoch) <= 5, row
    assert float(samples_per_s.replace(",", "")) > 0, row
    assert f"run id: {run_id}" in rest  # the row is the run the quickstart reports
