"""The dashboard's pages rendered by Streamlit's AppTest against a seeded engage home.

No Ray, no training, no browser: the event store and a SQLite MLflow store are filled
through engage's own write paths (``_dashboard_seed``), then each page is run as a script.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from _dashboard_seed import APP, MODEL, Seeded, seed
from streamlit.testing.v1 import AppTest

APP_FILE = Path(__file__).resolve().parents[3] / "dashboard" / "app.py"
PAGES = ("jobs", "alerts", "drift", "federated", "models")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed(tmp_path_factory.mktemp("dashboard") / ".engage")


@pytest.fixture
def open_page(monkeypatch: pytest.MonkeyPatch) -> Callable[..., AppTest]:
    """Run the app on one page with ENGAGE_HOME (and optionally the store URLs) set."""

    def run(page: str, home: Path, **env: str) -> AppTest:
        for name in ("ENGAGE_EVENTS_URI", "MLFLOW_TRACKING_URI"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("ENGAGE_HOME", str(home))
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        at = AppTest.from_file(str(APP_FILE), default_timeout=60)
        at.run()
        if page != "jobs":
            at.switch_page(f"screens/{page}.py")
            at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return run


def _frame(at: AppTest, column: str) -> pd.DataFrame:
    """The first table on the page that has ``column``."""
    for table in at.dataframe:
        if column in table.value.columns:
            return table.value
    raise AssertionError(
        f"no table with column {column!r}: {[list(t.value) for t in at.dataframe]}"
    )


def _charts(at: AppTest) -> list:
    return [e for e in at.main if getattr(e, "type", "") == "vega_lite_chart"]


def test_jobs_page_shows_seeded_jobs_with_stage_epoch_metrics_and_open_alerts(
    seeded: Seeded, open_page
) -> None:
    at = open_page("jobs", seeded.home)

    jobs = _frame(at, "last metrics").set_index("run id")
    assert set(jobs.index) == {seeded.train_run, seeded.fl_run, seeded.running_run}
    running = jobs.loc[seeded.running_run]
    assert (running["state"], running["stage"], running["epoch"]) == ("running", "train", 5)
    assert running["open alerts"] == "EngageJobStalled"
    trained = jobs.loc[seeded.train_run]
    assert trained["state"] == "finished"
    assert "val_accuracy 0.98" in trained["last metrics"]
    assert trained["MLflow run"].endswith(f"/runs/{seeded.train_run}")
    firing = _frame(at, "since")
    assert set(firing["rule"]) == {"EngageDriftDetected", "EngageJobStalled"}
    assert [m.value for m in at.metric if m.label == "open alerts"] == ["2"]


def test_alerts_page_shows_history_with_severity_labels_and_resolution(
    seeded: Seeded, open_page
) -> None:
    at = open_page("alerts", seeded.home)

    alerts = _frame(at, "resolved").set_index("rule")
    assert set(alerts.index) == {"EngageDriftDetected", "EngageJobStalled", "EngageDataBound"}
    bound = alerts.loc["EngageDataBound"]
    assert (bound["state"], bound["severity"]) == ("resolved", "warning")
    assert bound["resolved"] != "-"
    drift = alerts.loc["EngageDriftDetected"]
    assert (drift["state"], drift["severity"]) == ("firing", "critical")
    assert drift["labels"] == f"model={MODEL}, version=1"


def test_drift_page_shows_detector_results_over_time_and_the_features_that_moved(
    seeded: Seeded, open_page
) -> None:
    at = open_page("drift", seeded.home)

    assert any(APP in h.value and MODEL in h.value for h in at.header)
    assert [e.value for e in at.error] == [
        "Features that moved: **co2, temperature** (drift alert firing)"
    ]
    latest = _frame(at, "statistic").set_index(["detector", "feature"])
    assert latest.loc[("cusum", "co2"), "statistic"] == pytest.approx(1.89)
    assert latest.loc[("cusum", "co2"), "threshold"] == pytest.approx(1.0)
    assert latest.loc[("cusum", "humidity"), "statistic"] == pytest.approx(0.29)
    assert bool(latest.loc[("cusum", "co2"), "detector says drift"]) is True
    assert len(_charts(at)) == 2  # one statistic-vs-threshold chart per detector
    assert list(_frame(at, "version")["rule"]) == ["EngageDriftDetected"]
    checks = {m.label: m.value for m in at.metric}
    assert checks == {"checks: drift": "8", "checks: ok": "12"}


def test_federated_page_names_quarantined_and_flagged_clients_with_scores_and_rejections(
    seeded: Seeded, open_page
) -> None:
    at = open_page("federated", seeded.home)

    assert [e.value for e in at.error] == ["Quarantined: **house-04**"]
    assert [w.value for w in at.warning] == ["Flagged: **house-04**"]
    verdicts = _frame(at, "verdict").set_index("client")
    assert verdicts.loc["house-04", "verdict"] == "quarantined (round 3)"
    assert verdicts.loc["house-04", "flagged"] == 3
    assert verdicts.loc["house-04", "max score"] == pytest.approx(5.5)
    assert verdicts.loc["house-03", "rejected"] == "tampered 1"
    assert set(verdicts.loc[["house-01", "house-02", "house-03"], "verdict"]) == {"ok"}
    rejected = _frame(at, "reason")
    assert rejected[["round", "client", "reason"]].values.tolist() == [[2, "house-03", "tampered"]]
    assert len(_charts(at)) == 3  # global metric per round, score heatmap, rejections
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"rounds": "4", "clients": "4", "rejected updates": "1", "quarantined": "1"}


def test_models_page_shows_versions_aliases_and_gate(seeded: Seeded, open_page) -> None:
    at = open_page("models", seeded.home)

    models = _frame(at, "aliases")
    assert models[["model", "version", "aliases"]].values.tolist() == [
        [MODEL, "1", "candidate, champion"]
    ]
    assert models.loc[0, "gate"].startswith("gate passed: val_accuracy = 0.98")
    assert models.loc[0, "value"] == pytest.approx(0.98)


@pytest.mark.parametrize("page", PAGES)
def test_an_empty_home_says_what_to_run_and_creates_nothing(
    page: str, tmp_path: Path, open_page
) -> None:
    home = tmp_path / ".engage"
    at = open_page(page, home)

    told = " ".join(i.value for i in at.info)
    assert "engage quickstart" in told or "engage run" in told, told
    assert not at.error
    assert not home.exists()  # reading never creates the stores


@pytest.fixture
def refused_port() -> Iterator[int]:
    import socket

    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.mark.parametrize("page", PAGES)
def test_an_unreachable_store_is_one_clear_error(
    page: str, tmp_path: Path, open_page, refused_port: int
) -> None:
    at = open_page(
        page,
        tmp_path,
        ENGAGE_EVENTS_URI=f"postgresql://engage:secret@127.0.0.1:{refused_port}/events",
        MLFLOW_TRACKING_URI=f"http://127.0.0.1:{refused_port}",
    )

    assert len(at.error) == 1, [e.value for e in at.error]
    message = at.error[0].value
    assert f"127.0.0.1:{refused_port}" in message
    assert "hint:" in message
    assert "secret" not in message
    assert "Traceback" not in message
    assert not at.code
