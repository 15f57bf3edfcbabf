"""Run the whole suite as two pytest processes side by side: what ``make test`` calls.

Most of the system tests (integration, e2e) wait: on a Ray node starting, a served app
answering, a Prometheus rule's ``for`` running out. The unit tests keep one core busy. So
one lane runs the unit tests (and the watched Prometheus job, whose set-up already runs in
the background of the unit tests, see tests/conftest.py) while the other runs the system
tests, each with its own temporary directory, and the suite takes about as long as its
longer lane instead of the sum of both.

The system lane streams to the terminal; the unit lane's output is printed when it ends.
The exit status is the first non-zero status of the two lanes (0 when both pass).

Usage: ``python tests/lanes.py [extra pytest arguments]``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The unit lane: the unit tests, the watched Prometheus job (its set-up starts with them),
# and enough of the system tests that the two lanes take about as long as each other
# (balanced on the per-module times of a full run; `--durations` in each lane shows them).
UNIT_LANE = [
    "tests/unit",
    "tests/notebooks",
    "tests/e2e/test_interrupt.py",
    "tests/e2e/test_bad_input.py",
    "tests/e2e/test_monitor_cli.py",
    "tests/integration/tracking",
    "tests/integration/test_dashboard_browser.py",
    "tests/integration/test_deploy_manifests.py",
    "tests/integration/test_promtool.py",
    "tests/integration/monitor/test_watched_job.py",
]


def lanes() -> dict[str, list[str]]:
    """Each lane's pytest arguments; the system lane is every other test folder."""
    folders = sorted(p for p in (REPO / "tests").iterdir() if p.is_dir() and p.name[0] not in "._")
    named = {str(p.relative_to(REPO)) for p in folders}
    system = [f for f in sorted(named) if f not in UNIT_LANE]
    ignored = [f"--ignore={p}" for p in UNIT_LANE if p not in named and (REPO / p).exists()]
    return {"unit": [f for f in UNIT_LANE if (REPO / f).exists()], "system": system + ignored}


COMMON = ["-q", "-p", "no:cacheprovider", "--durations=30"]


def main(extra: list[str]) -> int:
    """Start both lanes, stream the system lane, then print the unit lane; return the status."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="engage-lanes-", ignore_cleanup_errors=True) as tmp:
        base = Path(tmp)
        unit_log = base / "unit.log"
        with unit_log.open("w") as log:
            unit = _start("unit", base, extra, stdout=log)
            # The e2e quickstart must run beside other load (issue 13): the unit lane is it.
            system = _start("system", base, extra, stdout=None, other_lane=unit.pid)
            try:
                codes = {"system": system.wait(), "unit": unit.wait()}
            finally:  # Ctrl-C or a CI time-out: stop both lanes, not just the one waited on
                for lane in (system, unit):
                    if lane.poll() is None:
                        lane.terminate()
        print(f"\n{'=' * 30} unit lane {'=' * 30}", flush=True)
        print(unit_log.read_text(), flush=True)
    took = time.monotonic() - started
    print(
        f"lanes: system exit {codes['system']}, unit exit {codes['unit']}; "
        f"both lanes together took {took:.0f} s ({took / 60:.1f} min)",
        flush=True,
    )
    return next((code for code in codes.values() if code != 0), 0)


def _start(
    lane: str, base: Path, extra: list[str], stdout, other_lane: int | None = None
) -> subprocess.Popen:
    """One pytest process for ``lane``, with its own --basetemp so neither cleans the other's.

    ``other_lane``: the pid of the lane running beside it, in ``ENGAGE_TESTS_OTHER_LANE``.
    """
    args = [*lanes()[lane], *COMMON, f"--basetemp={base / lane}", *extra]
    env = dict(os.environ)
    env.pop("ENGAGE_TESTS_OTHER_LANE", None)
    if other_lane is not None:
        env["ENGAGE_TESTS_OTHER_LANE"] = str(other_lane)
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=REPO,
        env=env,
        stdout=stdout,
        stderr=subprocess.STDOUT,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
