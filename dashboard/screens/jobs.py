"""Jobs: running and recent jobs, their stage, epoch and last metrics, and open alerts."""

from __future__ import annotations

import _ui
import pandas as pd
import streamlit as st

from engage.monitor.views import job_rows

st.title("Jobs")


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
    running = [r for r in rows if r.state == "running"]
    firing = store.open_alerts()
    left, middle, right = st.columns(3)
    left.metric("running jobs", len(running))
    middle.metric("jobs shown", len(rows))
    right.metric("open alerts", len(firing))
    if not rows:
        st.info(f"No jobs recorded yet. To get data, {_ui.QUICKSTART}, or `engage run SPEC`.")
    else:
        st.dataframe(_jobs_frame(rows), hide_index=True, width="stretch", column_config=_COLUMNS)
    st.subheader("Open alerts")
    if not firing:
        st.success("No open alerts.")
    else:
        st.dataframe(
            pd.DataFrame(
                {
                    "since": [_ui.when(a.started_at) for a in firing],
                    "severity": [a.severity for a in firing],
                    "rule": [a.rule for a in firing],
                    "job": [a.job for a in firing],
                    "run id": [a.run_id for a in firing],
                    "labels": [_ui.labels_text(a.labels) for a in firing],
                    "summary": [a.summary for a in firing],
                }
            ),
            hide_index=True,
            width="stretch",
        )
    _events(store, rows)


_COLUMNS = {
    "MLflow run": st.column_config.LinkColumn(
        "MLflow run", display_text=r"runs/([0-9a-zA-Z]+)$", help="opens in `mlflow ui`"
    )
}


def _jobs_frame(rows) -> pd.DataFrame:
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


def _events(store, rows) -> None:
    with st.expander("Events of one job"):
        choice = st.selectbox(
            "job", [r.run_id for r in rows], format_func=lambda i: _label(rows, i), key="job_events"
        )
        if choice:
            found = store.events(run_id=choice, limit=200)
            st.dataframe(
                pd.DataFrame(
                    {
                        "time": [_ui.when(e.ts) for e in found],
                        "event": [e.name for e in found],
                        "severity": [e.severity for e in found],
                        "message": [e.message for e in found],
                    }
                ),
                hide_index=True,
                width="stretch",
            )


def _label(rows, run_id: str) -> str:
    job = next((r.job for r in rows if r.run_id == run_id), "?")
    return f"{job} · {run_id}"


_ui.live(body)
