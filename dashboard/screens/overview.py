"""Overview, the landing page: how many runs, jobs, open alerts and models there are, the
latest runs with their key metric, the open alerts, and a way into every other page."""

from __future__ import annotations

import _ui
import altair as alt
import pandas as pd
import streamlit as st

from engage.monitor.views import Overview, RunRow, local_time, overview
from engage.monitor.views.jobs import KEY_METRICS

st.title("engage")

GUIDE = (
    ("experiments", "runs, metric curves, compare runs, lineage"),
    ("jobs", "running and recent jobs"),
    ("job", "one job live: step time, throughput, data stall, CPU, memory"),
    ("alerts", "every alert, firing and resolved"),
    ("drift", "drift checks of served models"),
    ("federated", "rounds, client scores, quarantines"),
    ("models", "registered versions, aliases, gates"),
)


def body() -> None:
    src = _ui.sources()
    found = overview(_ui.store(src), _ui.client(src))
    if found.empty:
        st.info(
            "Nothing recorded yet under this engage home. To get data, "
            f"{_ui.QUICKSTART}: it trains, registers and serves a model in about two minutes; "
            "or `engage run SPEC` for your own pipeline spec."
        )
    _counts(found)
    _latest(found.latest_runs)
    _alerts(found)
    st.subheader("Pages")
    columns = st.columns(2)
    for i, (name, what) in enumerate(GUIDE):
        with columns[i % 2]:
            _ui.link(name)
            st.caption(what)


def _counts(found: Overview) -> None:
    a, b, c, d = st.columns(4)
    a.metric("runs", found.runs)
    b.metric("jobs", found.jobs, help="jobs recorded in the event store")
    b.caption(f"{found.running_jobs} running")
    c.metric("open alerts", len(found.open_alerts))
    d.metric("registered models", found.models)
    d.caption(f"{found.versions} version(s)")


def _latest(runs: tuple[RunRow, ...]) -> None:
    st.subheader("Latest runs")
    if not runs:
        st.caption("No runs yet.")
        return
    # The metric most of these runs have, a validation one first: how good, not how trained.
    ranked = sorted(KEY_METRICS, key=lambda k: not k.startswith(("val_", "test_")))
    counts = {k: sum(k in r.metrics for r in runs) for k in ranked}
    key = max(ranked, key=counts.get) if any(counts.values()) else None
    frame = pd.DataFrame(
        {
            "run": [r.label for r in runs],
            "experiment": [r.experiment for r in runs],
            "status": [r.status for r in runs],
            "started": [local_time(r.started_ms) for r in runs],
            **({key: [r.metrics.get(key) for r in runs]} if key else {}),
        }
    )
    if key is not None and frame[key].notna().any():
        st.altair_chart(_metric_bars(frame, key), width="stretch")
    started = st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm")
    _ui.table(frame, {"run": "medium", "started": "medium"}, started=started)
    _ui.link("experiments", "All runs, curves and comparisons")


def _metric_bars(frame: pd.DataFrame, key: str) -> alt.Chart:
    shown = frame.dropna(subset=[key])
    return (
        alt.Chart(shown, title=f"{key} of the latest runs")
        .mark_bar()
        .encode(
            x=alt.X(f"{key}:Q", title=key),
            y=alt.Y("run:N", title=None, sort=None, axis=alt.Axis(labelLimit=260)),
            color=alt.Color("status:N", legend=alt.Legend(title="status")),
            tooltip=["run", "experiment", "status", alt.Tooltip(f"{key}:Q", format=".4g")],
        )
        .properties(height=100 + 34 * len(shown))
    )


def _alerts(found: Overview) -> None:
    st.subheader("Open alerts")
    if not found.open_alerts:
        st.success("No open alerts.")
        return
    frame = pd.DataFrame(
        {
            "since": [_ui.when(a.started_at) for a in found.open_alerts],
            "severity": [a.severity for a in found.open_alerts],
            "rule": [a.rule for a in found.open_alerts],
            "job": [a.job for a in found.open_alerts],
            "summary": [a.summary for a in found.open_alerts],
        }
    )
    _ui.table(frame, {"since": "medium", "rule": "medium", "job": "medium", "summary": "large"})
    _ui.link("alerts", "Alert history")


_ui.live(body)
