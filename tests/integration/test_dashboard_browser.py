"""The dashboard served by `streamlit run` on 127.0.0.1 and loaded in a real headless Chromium.

One test for the whole app: each page, opened at its own URL, must render its seeded
content and draw its key charts with no Streamlit exception, no "Page not found" and no
table cut off on the right; each page's screenshot is saved (under docs/screenshots/ when
ENGAGE_UPDATE_SCREENSHOTS=1, for the README).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engage.cli.dashboard import server_flags

REPO = Path(__file__).resolve().parents[1].parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = REPO / "docs" / "screenshots"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium not installed; `make test` installs it (Debian package chromium)",
    ),
]

# page (its URL path, "" for the landing page), and texts the seeded home must put in its
# DOM (tables draw on a canvas, and keep their cells in a hidden accessible grid: hence
# "attached", not "visible")
PAGES = {
    "overview": ("", ("Latest runs", "quickstart-lr", "EngageJobStalled", "Experiments")),
    "experiments": ("experiments", ("Metric curves", "Compare runs", "quickstart-lr", "train.lr")),
    "jobs": (
        "jobs",
        ("Open alerts on these jobs", "still-training", "EngageJobStalled", "val_accuracy 0.98"),
    ),
    "job": ("job", ("since last step", "data stall (last 60 s)", "EngageJobStalled")),
    "alerts": ("alerts", ("EngageDataBound", "resolved", "model=smart-home-occupancy, version=1")),
    "drift": ("drift", ("Features that moved", "co2, temperature", "Statistic vs threshold")),
    "federated": ("federated", ("Quarantined:", "quarantined (round 3)", "tampered 1")),
    "models": ("models", ("registered models", "candidate, champion", "gate passed")),
}
# Each page's key charts: how many must draw.
CHARTS = {"overview": 1, "experiments": 3, "jobs": 1, "job": 5, "drift": 2, "federated": 3}
# Every table's scrollable area: wider content than box means columns cut off on the right.
CUT_OFF_TABLES = """() => {
  const grids = Array.from(document.querySelectorAll('[data-testid=stDataFrame] .dvn-scroller'))
    .filter(s => s.clientWidth > 0);  // drawn: not inside a closed expander
  return {drawn: grids.length,
          cut: grids.filter(s => s.scrollWidth > s.clientWidth + 1)
                    .map(s => [s.scrollWidth, s.clientWidth])};
}"""


def _seed_module():
    path = REPO / "tests" / "unit" / "dashboard" / "_dashboard_seed.py"
    spec = importlib.util.spec_from_file_location("_dashboard_seed", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """`streamlit run dashboard/app.py` on a free loopback port, over a seeded home."""
    home = _seed_module().seed(tmp_path / ".engage").home
    port = _free_port()
    env = {
        k: v for k, v in os.environ.items() if k not in ("ENGAGE_EVENTS_URI", "MLFLOW_TRACKING_URI")
    }
    env["ENGAGE_HOME"] = str(home)
    log = (tmp_path / "streamlit.log").open("w")
    command = [sys.executable, "-m", "streamlit", "run", str(REPO / "dashboard" / "app.py")]
    proc = subprocess.Popen(
        [*command, *server_flags("127.0.0.1", port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, tmp_path / "streamlit.log")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"streamlit exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    pytest.fail(f"streamlit not healthy after {timeout_s:g} s:\n{log.read_text()}")


def test_every_page_renders_its_seeded_content_in_chromium(server: str, tmp_path: Path) -> None:
    pytest.importorskip("playwright", reason="playwright not installed (dev dependency)")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    shots = SCREENSHOTS if os.environ.get("ENGAGE_UPDATE_SCREENSHOTS") == "1" else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2200})
            for name, (path, texts) in PAGES.items():
                page.goto(f"{server}/{path}")
                for text in texts:
                    try:
                        page.get_by_text(text).first.wait_for(state="attached", timeout=30_000)
                    except PlaywrightTimeout:
                        page.screenshot(path=str(tmp_path / f"{name}-failed.png"), full_page=True)
                        pytest.fail(f"page {name}: no {text!r} after 30 s ({tmp_path})")
                charts = page.locator(
                    "[data-testid=stVegaLiteChart] canvas, [data-testid=stVegaLiteChart] svg"
                )
                for i in range(CHARTS.get(name, 0)):
                    charts.nth(i).wait_for(timeout=30_000)
                if name != "job":  # the Job page is charts and figures only
                    page.locator("[data-testid=stDataFrame]").first.wait_for(timeout=30_000)
                page.wait_for_timeout(500)  # the last chart's marks, after its canvas exists
                assert page.locator("[data-testid=stException]").count() == 0, name
                assert page.get_by_text("Page not found").count() == 0, name
                tables = page.evaluate(CUT_OFF_TABLES)
                assert tables["cut"] == [], f"{name}: a table is cut off on the right"
                assert tables["drawn"] >= (name != "job"), f"{name}: no table drawn"
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        finally:
            browser.close()
    assert sorted(p.name for p in shots.glob("*.png")) >= sorted(f"{n}.png" for n in PAGES)
