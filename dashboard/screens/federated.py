"""Federated: per run, the global model per round, every client's anomaly score per round,
rejected updates by reason, and the verdict table with quarantined and flagged clients."""

from __future__ import annotations

import _ui
import altair as alt
import pandas as pd
import streamlit as st

from engage.monitor.views import FederatedView, federated_runs, federated_view

st.title("Federated")
FLAG_AT = 1.0  # engage.monitor.rules.FL_SCORE_FLAG: a score this high flags the update


def body() -> None:
    src = _ui.sources()
    store = _ui.store(src)
    runs = federated_runs(store)
    if not runs:
        st.info(
            "No federated runs recorded yet. Run one: "
            "`engage run pipelines/federated-smart-home.yaml` (its spec shows how to turn "
            "simulated attacks on)."
        )
        return
    labels = {r.run_id: r.label for r in runs}
    chosen = st.selectbox("run", list(labels), format_func=labels.get, key="fl_run")
    run = next(r for r in runs if r.run_id == chosen)
    _show(federated_view(store, run, _ui.client(src)))


def _show(view: FederatedView) -> None:
    for note in view.notes:
        st.warning(note)
    rounds = int(view.scores["round"].max()) if len(view.scores) else 0
    a, b, c, d = st.columns(4)
    a.metric("rounds", rounds)
    b.metric("clients", len(view.clients))
    c.metric("rejected updates", len(view.rejected))
    d.metric("quarantined", len(view.quarantined))
    if view.quarantined:
        st.error(f"Quarantined: **{', '.join(view.quarantined)}**")
    if view.flagged:
        st.warning(f"Flagged: **{', '.join(view.flagged)}**")
    if not view.quarantined and not view.flagged:
        st.success("No client flagged or quarantined.")
    st.subheader("Global model per round")
    if view.global_metrics.empty:
        st.caption("No per-round validation metric in MLflow for this run.")
    else:
        st.altair_chart(_global(view.global_metrics), width="stretch")
    st.subheader("Anomaly score per client and round")
    if view.scores.empty:
        st.caption("No scored updates.")
    else:
        st.altair_chart(_heatmap(view.scores), width="stretch")
    st.subheader("Rejected updates by reason")
    if view.rejected.empty:
        st.caption("No update was rejected.")
    else:
        st.altair_chart(_rejections(view.rejected), width="stretch")
        _ui.table(view.rejected, {"detail": "large"})
    st.subheader("Per-client verdicts")
    _ui.table(view.clients, {"client": "medium", "rejected": "medium", "verdict": "medium"})
    if view.closing_table:
        with st.expander("the run's closing verdict table"):
            st.code(view.closing_table, language=None)
    if view.alerts:
        st.subheader("Alerts of this run")
        _ui.table(
            pd.DataFrame(
                {
                    "started": [_ui.when(x.started_at) for x in view.alerts],
                    "state": [x.state for x in view.alerts],
                    "rule": [x.rule for x in view.alerts],
                    "labels": [_ui.labels_text(x.labels) for x in view.alerts],
                    "summary": [x.summary for x in view.alerts],
                }
            ),
            {"started": "medium", "rule": "medium", "labels": "medium", "summary": "large"},
        )


def _global(frame: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("round:O", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("value:Q", scale=alt.Scale(zero=False)),
            color="metric:N",
            tooltip=["round", "metric", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(height=240)
    )


def _heatmap(scores: pd.DataFrame) -> alt.Chart:
    top = max(float(scores["score"].max()), 2 * FLAG_AT)
    return (
        alt.Chart(scores)
        .mark_rect()
        .encode(
            x=alt.X("round:O", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("client:N", axis=alt.Axis(labelOverlap=False)),
            color=alt.Color(
                "score:Q",
                scale=alt.Scale(domain=[0, FLAG_AT, top], range=["#e8f5e9", "#fff59d", "#c62828"]),
                title=f"score (flagged ≥ {FLAG_AT:g})",
            ),
            tooltip=["round", "client", alt.Tooltip("score:Q", format=".3f"), "flagged"],
        )
        .properties(height=90 + 34 * scores["client"].nunique())
    )


def _rejections(rejected: pd.DataFrame) -> alt.Chart:
    counts = rejected.groupby(["reason", "client"], as_index=False).size()
    return (
        alt.Chart(counts.rename(columns={"size": "updates"}))
        .mark_bar(size=18)
        .encode(
            x=alt.X("updates:Q", title="rejected updates", axis=alt.Axis(tickMinStep=1)),
            y=alt.Y("reason:N"),
            color="client:N",
            tooltip=["reason", "client", "updates"],
        )
        .properties(height=90 + 40 * counts["reason"].nunique())
    )


_ui.live(body)
