"""Experiments: MLflow runs to filter and sort, one run's metric curves, two or more runs
compared (parameter diff, overlaid curves) and where each run came from (lineage)."""

from __future__ import annotations

import _ui
import altair as alt
import pandas as pd
import streamlit as st

from engage.monitor.views import (
    RunRow,
    experiment_names,
    lineage,
    metric_history,
    metric_keys,
    param_diff,
    run_rows,
    runs_frame,
)
from engage.monitor.views.jobs import KEY_METRICS

st.title("Experiments")
STATUSES = ["RUNNING", "FINISHED", "FAILED", "KILLED", "SCHEDULED"]
FILTER_HELP = (
    "An MLflow search filter, e.g. `metrics.val_accuracy > 0.9` or "
    "``params.`train.lr` = '0.01'`` (the fields are the runs' metrics, params and tags)."
)


def body() -> None:
    src = _ui.sources()
    client = _ui.client(src)
    names = experiment_names(client)
    if not names:
        st.info(
            f"No runs yet in `{src.tracking_uri}`. Train one: {_ui.QUICKSTART}, "
            "or `engage run SPEC`; every run lands here with its metrics, parameters and lineage."
        )
        return
    a, b, c = st.columns([2, 2, 3])
    chosen = a.multiselect("experiment", names, key="exp_experiments", placeholder="all")
    statuses = b.multiselect("status", STATUSES, key="exp_status", placeholder="any")
    query = c.text_input(
        "filter", key="exp_filter", help=FILTER_HELP, placeholder="metrics.val_accuracy > 0.9"
    )
    rows = [r for r in run_rows(client, chosen, query) if not statuses or r.status in statuses]
    if not rows:
        st.info("No run matches. Clear the filters to see every run.")
        return
    _table(rows)
    st.subheader("Metric curves")
    _curves(client, rows)
    st.subheader("Compare runs")
    _compare(client, rows)


def _table(rows: list[RunRow]) -> None:
    keys = metric_keys(rows)
    default = [k for k in KEY_METRICS if k in keys and not k.startswith("samples")][:4]
    a, b, c = st.columns([4, 2, 1])
    shown = a.multiselect("metric columns", keys, default=default, key="exp_columns")
    options = ["started", "run", "status", "seconds", *shown]
    by = b.selectbox("sort by", options, key="exp_sort")
    descending = c.toggle("descending", value=True, key="exp_desc")
    st.caption(f"{len(rows)} run(s)")
    frame = runs_frame(rows, shown, by, descending)
    started = st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss")
    seconds = st.column_config.NumberColumn("seconds", format="%.0f")
    metrics = {m: st.column_config.NumberColumn(m, format="%.4g") for m in shown}
    _ui.table(
        frame,
        {"run": 3, "experiment": 3, "status": 2, "started": 3, "run id": 2},
        started=started,
        seconds=seconds,
        **metrics,
    )


def _curves(client, rows: list[RunRow]) -> None:
    labels = {r.run_id: r.label for r in rows}
    a, b = st.columns([2, 3])
    run_id = a.selectbox("run", list(labels), format_func=labels.get, key="exp_run")
    row = next(r for r in rows if r.run_id == run_id)
    keys = metric_keys([row])
    default = [k for k in keys if k in KEY_METRICS and not k.startswith("samples")] or keys[:4]
    chosen = b.multiselect("metrics", keys, default=default, key=f"exp_metrics_{run_id}")
    if not chosen:
        st.caption("This run logged no metrics." if not keys else "Pick a metric to draw.")
        return
    history = metric_history(client, [row], chosen)
    for i in range(0, len(chosen), 2):
        for column, key in zip(st.columns(2), chosen[i : i + 2], strict=False):
            part = history[history["metric"] == key]
            with column:
                st.altair_chart(_curve(part, key, by_run=False), width="stretch")
    with st.expander(f"lineage of {row.label}"):
        _lineage([row])


def _compare(client, rows: list[RunRow]) -> None:
    labels = {r.run_id: r.label for r in rows}
    chosen = st.multiselect(
        "runs to compare (two or more)",
        list(labels),
        default=_default_pair(rows),
        format_func=labels.get,
        key="exp_compare",
    )
    picked = [r for r in rows if r.run_id in chosen]
    if len(picked) < 2:
        st.caption("Pick two or more runs to compare their parameters, metrics and lineage.")
        return
    everything = st.toggle("show every parameter", key="exp_all_params")
    diff = param_diff(picked, only_differing=not everything)
    if diff.empty:
        st.success("These runs ran with the same parameters.")
    else:
        _ui.table(diff, {"parameter": "medium", "differs": "small"})
    common = [k for k in metric_keys(picked) if all(k in r.metrics for r in picked)]
    if common:
        key = st.selectbox("metric", common, key="exp_compare_metric")
        history = metric_history(client, picked, [key])
        st.altair_chart(_curve(history, key, by_run=True), width="stretch")
    st.markdown("**Lineage**")
    _lineage(picked)


def _default_pair(rows: list[RunRow]) -> list[str]:
    """The two newest runs with parameters (runs of a spec), else the two newest."""
    with_params = [r.run_id for r in rows if r.params]
    picked = with_params[:2] if len(with_params) >= 2 else [r.run_id for r in rows[:2]]
    return picked if len(picked) == 2 else []


def _curve(part: pd.DataFrame, key: str, by_run: bool) -> alt.Chart:
    one_step = part["step"].nunique() <= 1  # logged once: a curve over time reads better
    steps = alt.Axis(format="d", tickMinStep=1)  # steps are whole numbers
    x = _ui.time_x(part["time"]) if one_step else alt.X("step:Q", title="step", axis=steps)
    chart = alt.Chart(part, title=key).mark_line(point=len(part) <= 60)
    encoding = {
        "x": x,
        "y": alt.Y("value:Q", title=key, scale=alt.Scale(zero=False)),
        "tooltip": ["run", "step", "time:T", alt.Tooltip("value:Q", format=".4g")],
    }
    if by_run:
        encoding["color"] = alt.Color("run:N", legend=alt.Legend(orient="top", title=None))
    return chart.encode(**encoding).properties(height=300 if by_run else 260)


def _lineage(rows: list[RunRow]) -> None:
    table = lineage(rows)
    if table.empty:
        st.caption("No lineage tags: runs started by `engage run` record them.")
        return
    _ui.table(table, {"field": "small", **{r.label: "medium" for r in rows}})


_ui.live(body)
