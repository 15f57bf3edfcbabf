"""Job: one job over time while it runs: step time, throughput, data-stall ratio, the share
of step time blocked on gradient all-reduce (runs that time it), CPU and memory, with what its
metrics endpoint says right now. Open with ``/job?run=RUN_ID``."""

from __future__ import annotations

import _ui
import altair as alt
import pandas as pd
import streamlit as st

from engage.monitor.views import SERIES, JobDetail, job_detail, job_order, job_rows
from engage.monitor.views.job import SHARES

st.title("Job")


def body() -> None:
    from engage.monitor.live import collect

    src = _ui.sources()
    store = _ui.store(src)
    if store is None:
        st.info(
            f"No jobs recorded yet: the event store `{src.events_url}` does not exist. "
            f"Start one ({_ui.QUICKSTART}, or `engage run SPEC`) and watch it here."
        )
        return
    client = _ui.client(src)
    live = collect(src.home, store)
    rows, notes = job_rows(store, client, live)
    for note in notes:
        st.warning(note)
    if not rows:
        st.info(f"No jobs recorded yet. Start one ({_ui.QUICKSTART}, or `engage run SPEC`).")
        return
    ordered = job_order(rows)
    ids = [r.run_id for r in ordered]
    wanted = st.query_params.get("run")
    chosen = st.selectbox(
        "job",
        ids,
        index=ids.index(wanted) if wanted in ids else 0,
        format_func=lambda i: _label(ordered, i),
        key="job_run",
    )
    if wanted != chosen:  # the URL names the job shown (set only on change: a set reruns)
        st.query_params["run"] = chosen
    _show(job_detail(next(r for r in ordered if r.run_id == chosen), client, live))


def _label(rows, run_id: str) -> str:
    row = next(r for r in rows if r.run_id == run_id)
    return f"{row.job} · {row.state} · {run_id}"


def _show(detail: JobDetail) -> None:
    row, now = detail.row, detail.live
    a, b, c, d, e = st.columns(5)
    a.metric("state", row.state)
    b.metric("stage", row.stage or "-")
    c.metric("epoch", "-" if row.epoch is None else f"{row.epoch:.0f}")
    d.metric("data stall (last 60 s)", _share(getattr(now, "stall_ratio", None)))
    e.metric("since last step", _seconds(getattr(now, "since_last_step_s", None)))
    if row.open_alerts:
        st.error(f"Open alerts: **{', '.join(row.open_alerts)}**")
    if now is not None and now.error:
        st.warning(f"metrics endpoint {now.url}: {now.error}")
    if detail.running and (now is None or now.url is None):
        st.caption(
            "No metrics endpoint answers for this job: the data stall over the last minute "
            "and the time since its last step come from it (`engage monitor` lists endpoints)."
        )
    if detail.running and now is not None and now.spool_depth:
        st.caption(f"{now.spool_depth:.0f} tracking entries not yet in MLflow: the curves lag.")
    if not detail.in_mlflow:
        st.info(
            f"Run `{row.run_id}` is not in MLflow (yet): its curves appear once its tracking "
            "spool reaches MLflow (`engage sync` sends what is left)."
        )
        return
    if detail.series.empty:
        st.info("This run logged no step timings or resources (yet).")
        return
    _charts(detail.series)


def _charts(series: pd.DataFrame) -> None:
    present = [name for name in SERIES if name in set(series["series"])]
    for i in range(0, len(present), 2):
        for column, name in zip(st.columns(2), present[i : i + 2], strict=False):
            with column:
                st.altair_chart(_chart(series[series["series"] == name], name), width="stretch")


def _chart(part: pd.DataFrame, name: str) -> alt.Chart:
    title, unit = SERIES[name]
    return (
        alt.Chart(part, title=title)
        .mark_line(interpolate="monotone")
        .encode(
            x=_ui.time_x(part["time"]),
            y=alt.Y(
                "value:Q",
                title=unit,
                scale=alt.Scale(zero=name != "memory"),
                axis=alt.Axis(format=".0%") if name in SHARES else alt.Axis(),
            ),
            tooltip=["time:T", alt.Tooltip("value:Q", title=unit, format=".4g")],
        )
        .properties(height=260)
    )


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


_ui.live(body)
