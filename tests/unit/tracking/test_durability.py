"""The durability contract under SIGKILL (issue 11 item 2): reported = on disk within 0.5 s.

The reporter runs in its own process, reports as the driver does (Reporter -> the sinks'
fan-out -> the spool), then goes quiet; a SIGKILL after the age limit must find every
acknowledged point in the spool. Before the timer, 10 calls then quiet left 0 rows.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from engage.tracking import Spool

_REPORTER = """
import sys, time
from engage.events import FanOut, Reporter
from engage.tracking import PipelineRun, Spool
from engage.tracking.sinks import MetricSink

spool = Spool(sys.argv[1])
uri = "sqlite:///unused.db"
run = PipelineRun(spool, spool.create_run(uri, "e", "r", {}), uri, "e")
reporter = Reporter(FanOut([MetricSink(run)]), {"rank": "0"})
for step in range(10):
    reporter.metrics({"loss": 1.0 / (step + 1), "acc": step / 10}, step=step)
print(run.local_id, flush=True)  # every call above has returned: acknowledged
time.sleep(600)
"""


def test_points_of_a_quiet_reporter_are_on_disk_within_the_age_limit(tmp_path: Path) -> None:
    spool_path = tmp_path / "spool.db"
    reporter = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_REPORTER), str(spool_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    run = reporter.stdout.readline().strip()
    time.sleep(1.0)  # the 0.5 s age limit, and room for the synced write

    reporter.send_signal(signal.SIGKILL)
    reporter.wait()

    spool = Spool(spool_path)
    entries = spool.pending(run, 1_000)
    spool.close()
    assert sorted((e.key, e.step) for e in entries) == sorted(
        (key, step) for step in range(10) for key in ("loss", "acc")
    )
