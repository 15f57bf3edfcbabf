"""`engage monitor --once` during `engage quickstart`: the running job's row, live."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ENGAGE = Path(sys.executable).with_name("engage")


def _row(table: str, run_id: str) -> list[str] | None:
    """The cells of ``run_id``'s row in the live table (rich draws them between │)."""
    for line in table.splitlines():
        if run_id in line:
            return [c.strip() for c in line.strip().strip("│┃").split("│")]
    return None


def test_monitor_once_shows_the_quickstart_training_live(
    tmp_path: Path, engage_env: dict[str, str]
) -> None:
    home = tmp_path / "home"
    quickstart = subprocess.Popen(
        [str(ENGAGE), "quickstart", "--home", str(home), "--set", "deploy.after_training=false"],
        cwd=tmp_path, env=engage_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    try:
        assert quickstart.stdout is not None
        for line in quickstart.stdout:  # one line per stage and epoch (not a terminal)
            if line.lstrip().startswith("epoch 1/"):
                break
        deadline, row = time.monotonic() + 120, None
        while quickstart.poll() is None and time.monotonic() < deadline:
            view = subprocess.run(
                [str(ENGAGE), "monitor", "--once", "--home", str(home)],
                cwd=tmp_path, env=engage_env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert view.returncode == 0, view.stdout + view.stderr
            seen.append(view.stdout)
            row = next(
                (_row(view.stdout, m) for m in re.findall(r"[0-9a-f]{32}", view.stdout)), None
            )
            if row and row[3] == "train" and row[4] not in ("-", "0"):
                break
        rest, _ = quickstart.communicate(timeout=400)
    finally:
        if quickstart.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(quickstart.pid, signal.SIGKILL)
            quickstart.wait()

    assert quickstart.returncode == 0, rest[-3000:]
    assert row is not None, "no job row while the quickstart ran:\n" + "\n".join(seen)
    job, run_id, state, stage, epoch, _, _, samples_per_s = row[:8]
    assert (job, state, stage) == ("quickstart", "running", "train"), row
    assert 1 <= int(epoch) <= 5, row
    assert float(samples_per_s.replace(",", "")) > 0, row
    assert f"run id: {run_id}" in rest  # the row is the run the quickstart reports
