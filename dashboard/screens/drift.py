"""Drift: per deployment, each detector's statistic against its threshold over time, the
latest result per detector and feature, the features that moved, and the drift alerts."""

from __future__ import annotations

import _ui
import altair as alt
import pandas as pd
import streamlit as st

from engage.monitor.views import DriftView, drift_views

st.title("Drift")


def body() -> None:
    src = _ui.sources()
    views = drift_views(_ui.store(src), _ui.client(src))
    if not views:
        st.info(
            "No drift checks recorded yet. Serve a model with live drift checks: "
            f"{_ui.QUICKSTART}, which deploys the model and sends it a shifted batch; "
            "or check a table with `engage drift check --model NAME@alias --data FILE`."
        )
        return
    for view in views:
        _deployment(view)


def _deployment(view: DriftView) -> None:
    st.header(view.title)
    if view.moved:
        moved = ", ".join(view.moved)
        if view.moved_firing:
            st.error(f"Features that moved: **{moved}** (drift alert firing)")
        else:
            st.info(f"Features that moved in the last drift alert (resolved): {moved}")
    else:
        st.success("No drift alert: no feature has moved.")
    if view.checks:
        columns = st.columns(len(view.checks))
        for column, (outcome, count) in zip(columns, sorted(view.checks.items()), strict=True):
            column.metric(f"checks: {outcome}", f"{count:.0f}")
    if view.run_id is None:
        st.caption("No monitoring run in MLflow for this model: only its alerts are shown.")
    elif view.history.empty:
        st.caption(f"Monitoring run `{view.run_id}` has logged no detector results yet.")
    else:
        st.subheader("Latest result per detector and feature")
        checked = st.column_config.DatetimeColumn("checked", format="YYYY-MM-DD HH:mm:ss")
        verdict = st.column_config.CheckboxColumn(
            "detector says drift", help="this feature's own verdict at the latest check"
        )
        _ui.table(
            view.latest, {"checked": "medium"}, checked=checked, **{"detector says drift": verdict}
        )
        st.subheader("Statistic vs threshold over time")
        for detector, part in view.history.groupby("detector", sort=True):
            st.altair_chart(_chart(detector, part), width="stretch")
    _alerts(view)


def _chart(detector: str, part: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(part, title=f"{detector}")
        .mark_line(point=True)
        .encode(
            x=_ui.time_x(part["time"], title="checked at"),
            y=alt.Y("value:Q", title="value"),
            color=alt.Color("feature:N"),
            strokeDash=alt.StrokeDash("series:N", title="series"),
            tooltip=["time:T", "feature:N", "series:N", alt.Tooltip("value:Q", format=".4g")],
        )
        .properties(height=220)
    )


def _alerts(view: DriftView) -> None:
    st.subheader("Drift alerts")
    if not view.alerts:
        st.caption("None raised.")
        return
    _ui.table(
        pd.DataFrame(
            {
                "started": [_ui.when(a.started_at) for a in view.alerts],
                "resolved": [_ui.when(a.resolved_at) for a in view.alerts],
                "state": [a.state for a in view.alerts],
                "severity": [a.severity for a in view.alerts],
                "rule": [a.rule for a in view.alerts],
                "version": [a.labels.get("version", "-") for a in view.alerts],
                "summary": [a.summary for a in view.alerts],
            }
        ),
        {
            "started": 3,
            "resolved": 3,
            "state": 1,
            "severity": 1,
            "rule": 3,
            "version": 1,
            "summary": 6,
        },
    )


_ui.live(body)
