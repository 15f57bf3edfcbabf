"""Jobs: running and recent jobs on a timeline, their stage, epoch and last metrics, and
the open alerts on them (alerts of deployments are on the Alerts and Drift pages)."""

from __future__ import annotations

import time

import _ui
import altair as alt
import pandas as pd
import streamlit as st

from engage.monitor.views import JobRow, job_rows, jobs_timeline, open_alert_count

st.title("Jobs")
STATE_COLORS = {
    "running": "#1e88e5",
    "unreachable": "#fb8c00",
    "finished": "#43a047",
    "failed": "#e53935",
    "killed": "#8e24aa",
    "lost": "#757575",
}


def body() -> None:
    from engage.monitor.live import collect

    src = _ui.sources()
    store = _ui.store(src)
    if store is None:
        st.info(
            f"No jobs recorded yet: the event store `{src.events_url}` does not exist. "
            f"To get data, {_ui.QUICKSTART}, or `engage run SPEC`."
        )
        return
    rows, notes = job_rows(store, _ui.client(src), collect(src.home, store))
    for note in notes:
        st.warning(note)
    left, middle, right = st.columns(3)
    left.metric("running jobs", sum(r.state == "running" for r in rows))
    middle.metric("jobs shown", len(rows))
    right.metric("open alerts", open_alert_count(rows), help="firing alerts of the jobs below")
    if not rows:
        st.info(f"No jobs recorded yet. To get data, {_ui.QUICKSTART}, or `engage run SPEC`.")
        return
    st.altair_chart(_timeline(jobs_timeline(rows, time.time())), width="stretch")
    _ui.table(_jobs_frame(rows), _WIDTHS, **_COLUMNS)
    _ui.link("job", "Live view of one job: step time, throughput, data stall, CPU, memory")
    _open_alerts(store, rows)
    _events(store, rows)


_WIDTHS = {
    "job": 3,
    "state": 1,
    "stage": 1,
    "epoch": 1,
    "last metrics": 5,
    "open alerts": 3,
    "started": 3,
    "ended": 3,
    "run id": 1,
    "MLflow run": 2,
}
_COLUMNS = {
    "MLflow run": st.column_config.LinkColumn(
        "MLflow run", display_text=r"runs/([0-9a-zA-Z]{8})[0-9a-zA-Z]*$", help="opens `mlflow ui`"
    )
}


def _timeline(frame: pd.DataFrame) -> alt.Chart:
    states = sorted(set(frame["state"]))
    color = alt.Color(
        "state:N",
        scale=alt.Scale(domain=states, range=[STATE_COLORS.get(s, "#9e9e9e") for s in states]),
    )
    return (
        alt.Chart(frame, title="Jobs over time")
        .mark_bar(cornerRadius=3)
        .encode(
            x=_ui.time_x(pd.concat([frame["start"], frame["end"]]), "start", "started → ended"),
            x2="end:T",
            y=alt.Y("job:N", title=None, sort=None, axis=alt.Axis(labelLimit=220)),
            color=color,
            tooltip=["job", "run id", "state", "start:T", "end:T", "open alerts"],
        )
        .properties(height=110 + 36 * frame["job"].nunique())
    )


def _jobs_frame(rows: list[JobRow]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "job": [r.job for r in rows],
            "state": [r.state for r in rows],
            "stage": [r.stage or "-" for r in rows],
            "epoch": [None if r.epoch is None else int(r.epoch) for r in rows],
            "last metrics": [r.metrics_text for r in rows],
            "open alerts": [", ".join(r.open_alerts) or "-" for r in rows],
            "started": [_ui.when(r.started_at) for r in rows],
            "ended": [_ui.when(r.ended_at) for r in rows],
            "run id": [r.run_id for r in rows],
            "MLflow run": [r.mlflow_url for r in rows],
        }
    )


def _open_alerts(store, rows: list[JobRow]) -> None:
    st.subheader("Open alerts on these jobs")
    ids = {r.run_id for r in rows}
    everything = store.open_alerts()
    firing = [a for a in everything if a.run_id in ids]
    if not firing:
        st.success("No open alerts on these jobs.")
    else:
        frame = pd.DataFrame(
            {
                "since": [_ui.when(a.started_at) for a in firing],
                "severity": [a.severity for a in firing],
                "rule": [a.rule for a in firing],
                "job": [a.job for a in firing],
                "run id": [a.run_id for a in firing],
                "summary": [a.summary for a in firing],
            }
        )
        _ui.table(frame, {"summary": "large", "rule": "medium", "job": "medium"})
    others = len(everything) - len(firing)
    if others:
        st.caption(f"{others} more open alert(s) on deployments, not jobs:")
        _ui.link("alerts", "Alerts")


def _events(store, rows: list[JobRow]) -> None:
    with st.expander("Events of one job"):
        choice = st.selectbox(
            "job", [r.run_id for r in rows], format_func=lambda i: _label(rows, i), key="job_events"
        )
        if choice:
            found = store.events(run_id=choice, limit=200)
            frame = pd.DataFrame(
                {
                    "time": [_ui.when(e.ts) for e in found],
                    "event": [e.name for e in found],
                    "severity": [e.severity for e in found],
                    "message": [e.message for e in found],
                }
            )
            _ui.table(frame, {"time": "medium", "message": "large"})


def _label(rows: list[JobRow], run_id: str) -> str:
    job = next((r.job for r in rows if r.run_id == run_id), "?")
    return f"{job} · {run_id}"


_ui.live(body)
