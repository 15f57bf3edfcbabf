"""Alerts: the history of every alert, firing and resolved, with severity, rule and labels."""

from __future__ import annotations

import _ui
import pandas as pd
import streamlit as st

from engage.monitor.views import alert_rows

st.title("Alerts")


def body() -> None:
    src = _ui.sources()
    store = _ui.store(src)
    rows = alert_rows(store)
    if not rows:
        where = "" if store is not None else f" (the event store `{src.events_url}` does not exist)"
        st.info(
            f"No alerts recorded yet{where}. Alerts appear when a rule fires: to see one, "
            f"{_ui.QUICKSTART}, which ends by catching drift on the served model."
        )
        return
    frame = pd.DataFrame(
        {
            "started": [_ui.when(a.started_at) for a in rows],
            "resolved": [_ui.when(a.resolved_at) for a in rows],
            "state": [a.state for a in rows],
            "severity": [a.severity for a in rows],
            "rule": [a.rule for a in rows],
            "labels": [_ui.labels_text(a.labels) for a in rows],
            "job": [a.job for a in rows],
            "run id": [a.run_id for a in rows],
            "value": [a.value for a in rows],
            "summary": [a.summary for a in rows],
        }
    )
    firing = int((frame["state"] == "firing").sum())
    left, right = st.columns(2)
    left.metric("firing", firing)
    right.metric("resolved", len(frame) - firing)
    a, b, c = st.columns(3)
    states = a.multiselect("state", ["firing", "resolved"], key="alert_states")
    severities = b.multiselect("severity", sorted(set(frame["severity"])), key="alert_sev")
    rules = c.multiselect("rule", sorted(set(frame["rule"])), key="alert_rules")
    for column, chosen in (("state", states), ("severity", severities), ("rule", rules)):
        if chosen:
            frame = frame[frame[column].isin(chosen)]
    _ui.table(
        frame,
        {
            "started": 3,
            "resolved": 3,
            "state": 2,
            "severity": 2,
            "rule": 4,
            "labels": 4,
            "job": 3,
            "run id": 2,
            "value": 1,
            "summary": 6,
        },
    )


_ui.live(body)
