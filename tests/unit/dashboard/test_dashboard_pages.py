"""The dashboard's pages rendered by Streamlit's AppTest against a seeded engage home.

No Ray, no training, no browser: the event store and a SQLite MLflow store are filled
through engage's own write paths (``_dashboard_seed``), then each page is run as a script.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from _dashboard_seed import APP, COMPARED_LR, MODEL, TRAIN_PARAMS, Seeded, seed
from streamlit.testing.v1 import AppTest

APP_FILE = Path(__file__).resolve().parents[3] / "dashboard" / "app.py"
PAGES = ("overview", "experiments", "jobs", "job", "alerts", "drift", "federated", "models")


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
        if page != "overview":
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
    assert set(firing["rule"]) == {"EngageJobStalled"}


def test_jobs_page_header_counts_the_open_alerts_its_job_rows_show(
    seeded: Seeded, open_page
) -> None:
    at = open_page("jobs", seeded.home)

    jobs = _frame(at, "last metrics")
    shown = sum(len(cell.split(", ")) for cell in jobs["open alerts"] if cell != "-")
    assert [m.value for m in at.metric if m.label == "open alerts"] == [str(shown)] == ["1"]
    # The deployment's drift alert is no job's: the page says where it is instead.
    assert any("1 more open alert(s) on deployments" in c.value for c in at.caption)


def test_jobs_page_draws_the_jobs_on_a_timeline(seeded: Seeded, open_page) -> None:
    at = open_page("jobs", seeded.home)

    (timeline,) = _charts(at)
    spec = json.loads(timeline.proto.spec)
    assert spec["encoding"]["x"]["type"] == "temporal"
    assert spec["encoding"]["x2"]["field"] == "end"


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
    says = latest["detector says drift"]
    # Each feature's own verdict, not the detector's verdict repeated on every row.
    assert says[("cusum", "co2")]
    assert says[("cusum", "temperature")]
    assert not says[("cusum", "humidity")]
    assert not says[[("quality", f) for f in ("co2", "temperature", "humidity")]].any()
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


def _specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in _charts(at)]


def _x_axes(spec: dict) -> list[dict]:
    """The x encodings of a chart, of each layer too."""
    found = [spec.get("encoding", {}).get("x")] + [
        layer.get("encoding", {}).get("x") for layer in spec.get("layer", [])
    ]
    return [x for x in found if x]


@pytest.mark.parametrize("page", ["overview", "experiments", "jobs", "job", "drift"])
def test_time_axes_read_as_times_not_bare_milliseconds(
    page: str, seeded: Seeded, open_page
) -> None:
    at = open_page(page, seeded.home)

    temporal = [x for spec in _specs(at) for x in _x_axes(spec) if x.get("type") == "temporal"]
    if page in ("jobs", "job", "drift"):
        assert temporal, f"{page} draws no time axis"
    for x in temporal:
        assert x.get("axis", {}).get("format", "").startswith("%"), x


def test_every_page_is_served_at_its_own_name() -> None:
    import sys

    sys.path.insert(0, str(APP_FILE.parent))
    import _ui

    screens = APP_FILE.parent / "screens"
    names = [n for n, _, _ in _ui.SCREENS]
    assert sorted(p.stem for p in screens.glob("*.py")) == sorted(names) == sorted(PAGES)
    specs = _ui.page_specs()
    # Streamlit serves a page at its url_path (else one inferred from the file name); the
    # landing page at / besides. /jobs opened "Page not found" while Jobs was the default.
    assert [s["url_path"] for s in specs] == names
    assert [s["page"] for s in specs] == [f"screens/{n}.py" for n in names]
    assert [s["default"] for s in specs] == [True] + [False] * (len(names) - 1)


def test_every_table_fits_the_page_every_column_has_a_width(seeded: Seeded, open_page) -> None:
    for page in PAGES:
        at = open_page(page, seeded.home)
        for table in at.dataframe:
            config = json.loads(table.proto.columns)
            names = [str(c) for c in table.value.columns]
            unsized = [n for n in names if not config.get(n, {}).get("width")]
            assert not unsized, (page, unsized)


def test_overview_counts_runs_jobs_alerts_and_models_and_shows_the_latest_runs(
    seeded: Seeded, open_page
) -> None:
    at = open_page("overview", seeded.home)

    counts = {m.label: m.value for m in at.metric}
    # quickstart twice, the running job, the federated run (not its rounds, not monitoring)
    assert counts == {"runs": "4", "jobs": "3", "open alerts": "2", "registered models": "1"}
    latest = _frame(at, "experiment")
    assert len(latest) == 4
    assert "val_accuracy" in latest.columns
    assert set(_frame(at, "since")["rule"]) == {"EngageDriftDetected", "EngageJobStalled"}
    assert len(_charts(at)) == 1  # the latest runs' key metric
    assert not at.info


def test_experiments_page_lists_filters_and_sorts_runs(seeded: Seeded, open_page) -> None:
    at = open_page("experiments", seeded.home)

    runs = _frame(at, "run id")
    assert {seeded.train_run, seeded.compared_run, seeded.running_run, seeded.fl_run} == set(
        runs["run id"]
    )
    assert seeded.monitoring_run not in set(runs["run id"])

    at.selectbox(key="exp_sort").select("val_accuracy").run()
    runs = _frame(at, "run id")
    assert runs["run id"].iloc[0] == seeded.train_run
    assert runs["val_accuracy"].iloc[0] == pytest.approx(0.98)
    assert runs["val_accuracy"].dropna().is_monotonic_decreasing
    at.toggle(key="exp_desc").set_value(False).run()
    assert _frame(at, "run id")["val_accuracy"].dropna().is_monotonic_increasing

    at.text_input(key="exp_filter").input("metrics.val_accuracy < 0.895").run()
    assert list(_frame(at, "run id")["run id"]) == [seeded.compared_run]
    at.multiselect(key="exp_experiments").set_value(["federated-smart-home"]).run()
    assert at.info[0].value.startswith("No run matches")

    at.text_input(key="exp_filter").input("metrics.val_accuracy <<< 1").run()
    assert len(at.error) == 1
    assert "invalid run filter" in at.error[0].value
    assert "Traceback" not in at.error[0].value


def test_experiments_page_draws_a_runs_metric_curves(seeded: Seeded, open_page) -> None:
    at = open_page("experiments", seeded.home)

    at.selectbox(key="exp_run").select(seeded.train_run).run()
    assert at.multiselect(key=f"exp_metrics_{seeded.train_run}").value == [
        "train_loss",
        "val_accuracy",
    ]
    curves = [s for s in _specs(at) if "color" not in s["encoding"]]  # not the comparison
    assert [s["title"] for s in curves] == ["train_loss", "val_accuracy"]
    assert all(s["encoding"]["x"]["field"] == "step" for s in curves)


def test_experiments_page_compares_runs_with_a_param_diff_and_overlaid_curves(
    seeded: Seeded, open_page
) -> None:
    at = open_page("experiments", seeded.home)

    at.multiselect(key="exp_compare").set_value([seeded.train_run, seeded.compared_run]).run()
    diff = _frame(at, "differs").set_index("parameter")
    # Only what differs, by default: the learning rate, and the gate only the first run had.
    assert diff.index.tolist() == [
        "tracking.registration.gate.direction",
        "tracking.registration.gate.metric",
        "train.lr",
    ]
    assert sorted(diff.loc["train.lr"].iloc[:2]) == sorted([TRAIN_PARAMS["train.lr"], COMPARED_LR])
    assert "-" in diff.loc["tracking.registration.gate.metric"].tolist()
    at.toggle(key="exp_all_params").set_value(True).run()
    every = _frame(at, "differs").set_index("parameter")
    assert not every.loc["train.epochs", "differs"]
    overlaid = [s for s in _specs(at) if s.get("encoding", {}).get("color", {}).get("field")]
    assert any(s["encoding"]["color"]["field"] == "run" for s in overlaid)
    lineage = _frame(at, "field").set_index("field")
    assert lineage.loc["git commit"].str.startswith(("a1b2c3d", "d4e5f6a")).all()
    assert set(lineage.loc["dataset digest"]) == {"5f2c9e1d0b7a4c3e"}


def test_job_page_draws_the_running_job_over_time(seeded: Seeded, open_page) -> None:
    at = open_page("job", seeded.home)

    assert at.selectbox(key="job_run").value == seeded.running_run  # running jobs first
    tiles = {m.label: m.value for m in at.metric}
    assert (tiles["state"], tiles["stage"], tiles["epoch"]) == ("running", "train", "5")
    assert [e.value for e in at.error] == ["Open alerts: **EngageJobStalled**"]
    titles = [s.get("title") for s in _specs(at)]
    assert [t.split(" ")[0] for t in titles] == [
        "Step",
        "Throughput",
        "Data-stall",
        "All-reduce:",  # the seeded running job times DDP's all-reduce (train.comm)
        "CPU",
        "Memory",
    ]
    shares = [s for s in _specs(at) if s.get("title", "").startswith(("Data-stall", "All-reduce"))]
    assert [s["encoding"]["y"]["axis"]["format"] for s in shares] == [".0%", ".0%"]


def test_job_page_puts_the_chosen_job_in_the_url_and_draws_a_finished_one_too(
    seeded: Seeded, open_page
) -> None:
    at = open_page("job", seeded.home)

    at.selectbox(key="job_run").set_value(seeded.train_run).run()
    assert at.query_params["run"] == seeded.train_run  # /job?run=ID opens this job
    assert {m.label: m.value for m in at.metric}["state"] == "finished"
    assert len(_charts(at)) == 5  # no all-reduce chart: this run did not time it


def test_job_page_opens_the_job_the_url_names(seeded: Seeded, monkeypatch) -> None:
    monkeypatch.setenv("ENGAGE_HOME", str(seeded.home))
    monkeypatch.syspath_prepend(str(APP_FILE.parent))  # the page imports _ui as app.py does
    at = AppTest.from_file(str(APP_FILE.parent / "screens" / "job.py"), default_timeout=60)
    at.query_params["run"] = seeded.fl_run
    at.run()

    assert not at.exception
    assert at.selectbox(key="job_run").value == seeded.fl_run
