"""`engage monitor --once` during `engage quickstart`: the running job's row, live.

The quickstart is the session's one run (``quickstart_session`` in tests/e2e/conftest.py),
which polls the live view from its train stage until the running job's row shows an epoch.
On an idle machine the quickstart's 5 epochs take about 5 s, less than a view can take
beside them on 2 cores (one took 6 s): every epoch can then fall between two views, and the
first row with an epoch is the next stage's, with the last epoch's figures, the job still
running.
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
    assert (job, state) == ("quickstart", "running"), row
    if stage == "train":
        assert 1 <= int(epoch) <= 5, row
    else:  # all 5 epochs ran between two views: the running job's next stage shows the last
        assert int(epoch) == 5, row
    assert float(samples_per_s.replace(",", "")) > 0, row
    assert f"run id: {run_id}" in rest  # the row is the run the quickstart reports
