"""``make test`` runs three lanes (tests/lanes.py): every test file is in exactly one of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _lanes() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("lanes", REPO / "tests" / "lanes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.lanes()


def _selects(args: list[str], path: Path) -> bool:
    """Whether pytest given ``args`` (paths and --ignore=PATH) would collect ``path``."""
    rel = path.relative_to(REPO)
    ignored = [Path(a.removeprefix("--ignore=")) for a in args if a.startswith("--ignore=")]
    chosen = [Path(a) for a in args if not a.startswith("-")]
    under = lambda roots: any(rel == r or r in rel.parents for r in roots)  # noqa: E731
    return under(chosen) and not under(ignored)


def test_every_test_file_runs_in_exactly_one_lane() -> None:
    lanes = _lanes()
    files = sorted((REPO / "tests").rglob("test_*.py"))
    assert len(files) > 50
    for path in files:
        owners = [name for name, args in lanes.items() if _selects(args, path)]
        assert len(owners) == 1, f"{path.relative_to(REPO)} runs in {owners or 'no lane'}"


def test_every_path_a_lane_names_exists() -> None:
    for name, args in _lanes().items():
        for arg in args:
            path = REPO / arg.removeprefix("--ignore=")
            assert path.exists(), f"lane {name} names {arg}, which is not there"


_DRIVER = """
import importlib.util, sys, contextlib
spec = importlib.util.spec_from_file_location("lanes", sys.argv[1])
lanes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lanes)
lanes.lanes = lambda: {name: [sys.argv[2]] for name in ("unit", "waiting", "system")}
lanes._postgres_for_the_lanes = contextlib.nullcontext
sys.exit(lanes.main([]))
"""


def test_sigterm_stops_every_lane(tmp_path: Path) -> None:
    """A CI time-out sends SIGTERM: the lanes' pytest processes must not outlive lanes.py."""
    import contextlib
    import signal
    import subprocess
    import sys
    import time

    import psutil

    waiting = tmp_path / "test_waits.py"
    waiting.write_text("import time\n\ndef test_waits():\n    time.sleep(120)\n")
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(REPO / "tests" / "lanes.py"), str(waiting)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver_ps = psutil.Process(driver.pid)
    lanes: list[psutil.Process] = []
    family = [driver_ps]  # the driver's processes only: this pytest has children of its own
    # One of this pytest's own: the unit lane runs the watched-job scenario's `engage run`
    # beside this test (tests/conftest.py); cleaning up here must not kill it.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        deadline = time.monotonic() + 60
        while len(lanes) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
            lanes = [
                p
                for p in psutil.Process(driver.pid).children()
                if "pytest" in " ".join(p.cmdline())
            ]
        assert len(lanes) == 3, "the three lanes did not start"
        time.sleep(2)  # into the waiting test
        family = [driver_ps, *driver_ps.children(recursive=True)]

        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=60)
        _, alive = psutil.wait_procs(lanes, timeout=10)
    finally:  # left running, the lanes are no longer ours to find: kill what was recorded
        for p in [*family, *lanes]:
            with contextlib.suppress(psutil.Error):
                p.kill()
        try:  # a SIGKILL lands a moment after kill() returns
            bystander.wait(timeout=2)
            bystander_alive = False
        except subprocess.TimeoutExpired:
            bystander_alive = True
        bystander.kill()
        bystander.wait()

    assert bystander_alive, "the test's clean-up killed a process that was not the driver's"
    assert code != 0
    assert alive == [], f"lanes left running after SIGTERM: {[p.pid for p in alive]}"
